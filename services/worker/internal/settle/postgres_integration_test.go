//go:build integration

package settle_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/services/worker/internal/settle"
	"github.com/sundialhq/sundial/testkit/pgtest"
)

// The dead-letter writer stores the target's host beside the envelope
// (dead_letters.target_host, the console's grouping by host): an HTTP
// URL's host and port, lower-cased, and a Kafka target's topic. A
// re-driven execution that dies again at a newer target takes the new
// host with the new envelope; a late redelivery of an older attempt
// changes neither.
func TestIntegrationDeadLetterStoresTargetHost(t *testing.T) {
	pool := pgtest.Migrated(t)
	store := settle.NewPostgres(pool, nil)
	ctx := context.Background()
	dead := time.Now().UTC().Truncate(time.Millisecond)
	letter := func(execID string, attempt int32, target *sundialv1.Target) *sundialv1.DeadLetter {
		return &sundialv1.DeadLetter{
			Firing:     &sundialv1.Firing{ExecutionId: execID, Tenant: "acme", JobId: uuid.NewString(), Attempt: attempt, Target: target},
			ErrorClass: "http_5xx", LastError: "HTTP 503 from target", HttpStatus: 503, Attempts: attempt,
			DeadTime: timestamppb.New(dead),
		}
	}
	web := func(u string) *sundialv1.Target {
		return &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: u, Method: "POST"}}}
	}
	hostOf := func(execID string) *string {
		t.Helper()
		var h *string
		if err := pool.QueryRow(ctx, `SELECT target_host FROM dead_letters WHERE execution_id = $1`, execID).Scan(&h); err != nil {
			t.Fatal(err)
		}
		return h
	}
	upsert := func(dl *sundialv1.DeadLetter) {
		t.Helper()
		env, err := firing.Encode(dl.GetFiring())
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := store.UpsertDeadLetter(ctx, dl, env); err != nil {
			t.Fatal(err)
		}
	}

	for _, c := range []struct {
		target *sundialv1.Target
		want   string
	}{
		{web("https://Hooks.Example:8443/run?token=x"), "hooks.example:8443"},
		{web("http://billing.example/charge"), "billing.example"},
		{&sundialv1.Target{Kind: &sundialv1.Target_Kafka{Kafka: &sundialv1.KafkaTarget{Topic: "Orders"}}}, "kafka Orders"},
		{nil, ""},
	} {
		id := uuid.NewString()
		upsert(letter(id, 1, c.target))
		if h := hostOf(id); h == nil || *h != c.want {
			t.Errorf("target %v: target_host %v, want %q", c.target, h, c.want)
		}
	}

	// The same execution dies again at attempt 3 after its job moved to
	// another host; then attempt 2's late redelivery arrives.
	id := uuid.NewString()
	upsert(letter(id, 1, web("http://old.example/")))
	upsert(letter(id, 3, web("http://new.example:81/")))
	upsert(letter(id, 2, web("http://stale.example/")))
	if h := hostOf(id); h == nil || *h != "new.example:81" {
		t.Errorf("after a newer death and a late older one: target_host %v, want new.example:81", h)
	}
}
