package lease_test

import (
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/sundialhq/sundial/pkg/store/lease"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Every key of one job must hash to one Redis Cluster slot, or the
// one-round-trip script would be refused on a cluster.
func TestKeysShareHashTag(t *testing.T) {
	s := lease.New(nil, lease.WithPrefix("p:"))
	k := s.Keys("job-1", "exec-1")
	for _, key := range []string{k.Lease, k.Done, k.Version, k.Fence, k.Running, k.Buffered, k.BufferSeen, k.Deliveries, k.Cancel} {
		if !strings.HasPrefix(key, "p:{j:job-1}:") {
			t.Errorf("key %q does not start with the job's hash tag under the prefix", key)
		}
	}
	if k.Lease == k.Done {
		t.Fatal("lease and done keys collide")
	}
	if other := s.Keys("job-1", "exec-2"); other.Fence != k.Fence || other.Lease == k.Lease {
		t.Fatal("fence must be per job, lease per execution")
	}
	if lease.New(nil).Keys("j", "e").Fence != lease.DefaultPrefix+"{j:j}:fence" {
		t.Fatal("default prefix not applied")
	}
}

func TestOutcomeString(t *testing.T) {
	for o, want := range map[lease.Outcome]string{lease.Acquired: "acquired", lease.AlreadyDone: "already_done", lease.Stale: "stale", lease.Held: "held", lease.Overlapping: "overlapping", lease.Waiting: "waiting", lease.Poison: "poison", lease.Cancelled: "cancelled", 9: "outcome(9)"} {
		if o.String() != want {
			t.Errorf("%d.String() = %q, want %q", int(o), o.String(), want)
		}
	}
}

func TestVersionMessage(t *testing.T) {
	for _, c := range []struct {
		msg string
		id  string
		v   int64
		ok  bool
	}{{"0192 7", "0192", 7, true}, {"0192", "", 0, false}, {" 7", "", 0, false}, {"0192 x", "", 0, false}} {
		id, v, ok := lease.Version(c.msg)
		if id != c.id || v != c.v || ok != c.ok {
			t.Errorf("Version(%q) = %q, %d, %v; want %q, %d, %v", c.msg, id, v, ok, c.id, c.v, c.ok)
		}
	}
}

// Keys cuts its keys from one string; each must still be exactly the key
// it names.
func TestKeysAreExact(t *testing.T) {
	k := lease.New(nil, lease.WithPrefix("p:")).Keys("job-1", "exec-1")
	want := lease.Keys{
		Lease: "p:{j:job-1}:lease:exec-1", Done: "p:{j:job-1}:done:exec-1", Version: "p:{j:job-1}:ver",
		Fence: "p:{j:job-1}:fence", Running: "p:{j:job-1}:runs", Buffered: "p:{j:job-1}:bufq", BufferSeen: "p:{j:job-1}:bufseen",
		Deliveries: "p:{j:job-1}:dlv:exec-1", Cancel: "p:{j:job-1}:cancel:exec-1",
	}
	if k != want {
		t.Fatalf("Keys = %+v, want %+v", k, want)
	}
	s := lease.New(nil)
	if n := testing.AllocsPerRun(100, func() { _ = s.Keys("job-1", "exec-1") }); n > 1 {
		t.Errorf("Keys allocates %v times, want once", n)
	}
}
