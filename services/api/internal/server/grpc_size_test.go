package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// An oversized payload is a validation error naming the field, whatever its
// size up to MaxRequestBytes: a 10 MB payload gets the same InvalidArgument
// naming payload as a 900 kB one, not the transport's own ResourceExhausted
// ("received message larger than max").
func TestOversizedPayloadIsInvalidArgumentOverGRPC(t *testing.T) {
	tokens, err := auth.NewTokens(map[string]string{"tok": "acme"})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewGRPC(GRPCConfig{Addr: "127.0.0.1:0", Tokens: tokens, Jobs: newService(t, untouchable{t: t})})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	conn, err := grpc.NewClient(srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(auth.Bearer("tok")))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := sundialv1.NewJobServiceClient(conn)

	for _, size := range []int{900 << 10, 10 << 20, MaxRequestBytes - 4096} {
		job := validJob()
		job.Payload = make([]byte, size)
		_, err := client.CreateJob(ctx, &sundialv1.CreateJobRequest{Job: job})
		if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "payload: ") {
			t.Errorf("payload of %d bytes: got %v, want InvalidArgument naming payload", size, err)
		}
	}
}
