//go:build integration

package jobwake_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sundialhq/sundial/pkg/postgres/jobwake"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

// A notification sent in a transaction reaches a listener on Channel when
// the transaction commits, carrying the job id, and never when it rolls
// back.
func TestNotifyIsDeliveredAtCommitOnly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn := testinfra.PostgresDSN(t)
	listen, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer listen.Close(context.Background())
	if _, err := listen.Exec(ctx, "LISTEN "+jobwake.Channel); err != nil {
		t.Fatal(err)
	}
	send, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer send.Close(context.Background())
	// The channel is the database's: other tests' jobs, in their own
	// schemas at the same time, wake it too. This test's payloads are its
	// own names and the others are passed over.
	name := testinfra.UniqueName(t, 40)
	rolledBack, committedID := name+"-rolled-back", name+"-committed"

	rolled, err := send.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := jobwake.Notify(ctx, rolled, rolledBack); err != nil {
		t.Fatal(err)
	}
	if err := rolled.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	committed, err := send.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := jobwake.Notify(ctx, committed, committedID); err != nil {
		t.Fatal(err)
	}
	if err := committed.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for {
		n, err := listen.WaitForNotification(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n.Payload == rolledBack || n.Payload == committedID && n.Channel != jobwake.Channel {
			t.Fatalf("got %q on %q, want %s on %q (the rolled-back one must not arrive)", n.Payload, n.Channel, committedID, jobwake.Channel)
		}
		if n.Payload == committedID {
			return
		}
	}
}
