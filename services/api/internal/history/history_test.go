package history

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sundialhq/sundial/pkg/process/clock"
	"github.com/sundialhq/sundial/pkg/process/connsec"
	"github.com/sundialhq/sundial/pkg/store/ledger"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeSession is a ledger session that only counts Close; the embedded nil
// Session panics if the reader ever queries it.
type fakeSession struct {
	ledger.Session
	closed *int
}

func (f fakeSession) Close() { *f.closed++ }

func TestLazyConnectsOnFirstUseAndRetriesSpaced(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	attempts, closed := 0, 0
	fail := true
	l, err := NewLazy(Config{
		Hosts: []string{"127.0.0.1:1"}, Keyspace: "sundial", Clock: clk, RetryEvery: 5 * time.Second,
		Connect: func(ledger.ConnectConfig) (ledger.Session, error) {
			attempts++
			if fail {
				return nil, errors.New("connection refused")
			}
			return fakeSession{closed: &closed}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Start(context.Background()); err != nil || attempts != 0 {
		t.Fatalf("Start connected (%d attempts) or failed: %v", attempts, err)
	}
	ctx := context.Background()
	if _, err := l.GetExecution(ctx, "x"); !errors.Is(err, ErrUnavailable) || attempts != 1 {
		t.Fatalf("first use: %v after %d attempts", err, attempts)
	}
	// Within RetryEvery the last error is returned without dialing again.
	if _, _, err := l.ListByJob(ctx, "j", 10, ""); !errors.Is(err, ErrUnavailable) || attempts != 1 {
		t.Fatalf("second use: %v after %d attempts", err, attempts)
	}
	fail = false
	clk.Advance(6 * time.Second)
	if _, err := l.get(); err != nil || attempts != 2 {
		t.Fatalf("after RetryEvery: %v after %d attempts", err, attempts)
	}
	if _, err := l.get(); err != nil || attempts != 2 {
		t.Fatalf("connected reader not reused: %v after %d attempts", err, attempts)
	}
	l.Stop()
	l.Stop()
	if closed != 1 {
		t.Fatalf("session closed %d times", closed)
	}
	if _, err := l.GetExecution(ctx, "x"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("after Stop: %v", err)
	}
}

func TestNewLazyChecksConfig(t *testing.T) {
	if _, err := NewLazy(Config{Keyspace: "sundial"}); err == nil {
		t.Fatal("accepted no hosts")
	}
	if _, err := NewLazy(Config{Hosts: []string{"h"}, Keyspace: "bad-name!"}); err == nil {
		t.Fatal("accepted a bad keyspace")
	}
}

// The TLS and credentials of --cassandra-* reach every connection attempt.
func TestLazyConnectsWithTheSessionSettings(t *testing.T) {
	sec := ledger.Security{
		Username: "api", Password: connsec.Password{Value: connsec.NewSecret("pw")},
		TLS: connsec.TLS{Enabled: true, ServerName: "cassandra.internal"},
	}
	session := ledger.ConnectConfig{Hosts: []string{"ignored"}}
	if err := sec.Apply(&session); err != nil {
		t.Fatal(err)
	}
	var got ledger.ConnectConfig
	l, err := NewLazy(Config{
		Hosts: []string{"cass-0:9042"}, Keyspace: "sundial", Session: session,
		Connect: func(cc ledger.ConnectConfig) (ledger.Session, error) {
			got = cc
			return nil, errors.New("refused")
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = l.get()
	if len(got.Hosts) != 1 || got.Hosts[0] != "cass-0:9042" || got.TLS != session.TLS || got.Authenticator == nil {
		t.Fatalf("connected with %+v", got)
	}
}
