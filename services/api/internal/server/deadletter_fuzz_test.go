package server

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/api/internal/store"
)

// FuzzDeadLetterToProto answers a stored dead letter whatever its envelope
// column holds (the worker writes the bytes of the record that died, and a
// record is whatever reached the fire topic): it never panics; an envelope
// that decodes is answered as it decodes; one that does not is answered
// with the row's own identity, so the dead letter can still be found and
// re-driven.
func FuzzDeadLetterToProto(f *testing.F) {
	at := time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)
	good, err := firing.Encode(&sundialv1.Firing{ExecutionId: "0192d7a0-0000-7000-8000-000000000001", JobId: "0192d7a0-0000-7000-8000-0000000000aa",
		Tenant: "acme", Attempt: 3, ScheduledTime: timestamppb.New(at), Payload: []byte("p"),
		Target: &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "https://x.example/", Headers: map[string]string{"Authorization": "Bearer {{secret:tok}}"}}}}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good, int32(3))
	f.Add([]byte{}, int32(0))
	f.Add([]byte("\xff\xff not an envelope"), int32(7))
	s := &DeadLetterService{logger: slog.New(slog.DiscardHandler)}
	f.Fuzz(func(t *testing.T, env []byte, last int32) {
		row := store.DeadLetter{ExecutionID: "0192d7a0-0000-7000-8000-000000000002", Tenant: "acme", JobID: "0192d7a0-0000-7000-8000-0000000000bb",
			ErrorClass: "http_5xx", LastError: "status 503", HTTPStatus: 503, Attempts: 1, LastAttempt: last, Envelope: env, DeadAt: at}
		dl := s.toProto(context.Background(), row)
		if dl.GetFiring() == nil || !dl.GetDeadTime().AsTime().Equal(at) || dl.GetErrorClass() != row.ErrorClass {
			t.Fatalf("dead letter %v does not carry the row", dl)
		}
		if decoded, err := firing.Decode(env); err == nil {
			if !proto.Equal(decoded, dl.GetFiring()) {
				t.Fatal("the answer's firing differs from the stored envelope")
			}
			return
		}
		fr := dl.GetFiring()
		if fr.GetExecutionId() != row.ExecutionID || fr.GetJobId() != row.JobID || fr.GetTenant() != row.Tenant || fr.GetAttempt() != last {
			t.Fatalf("undecodable envelope answered as %v, want the row's identity", fr)
		}
	})
}
