package server

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialhq/sundial/pkg/domain/auth"
)

// storesReadyUnary answers a call Unavailable while ready fails, so a
// client of an api still waiting for its stores is told to retry, and
// which store it waits for, rather than getting an internal error from
// a table that does not exist yet.
func storesReadyUnary(ready func(context.Context) error) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := storesNotReady(ctx, ready, info.FullMethod); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

func storesReadyStream(ready func(context.Context) error) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := storesNotReady(ss.Context(), ready, info.FullMethod); err != nil {
			return err
		}
		return handler(srv, ss)
	}
}

func storesNotReady(ctx context.Context, ready func(context.Context) error, method string) error {
	if auth.Public(method) {
		return nil
	}
	if err := ready(ctx); err != nil {
		return status.Errorf(codes.Unavailable, "the api is %v; retry later", err)
	}
	return nil
}
