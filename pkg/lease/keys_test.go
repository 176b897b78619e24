package lease_test

import (
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/sundialhq/sundial/pkg/lease"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Every key of one job must hash to one Redis Cluster slot, or the
// one-round-trip script would be refused on a cluster.
func TestKeysShareHashTag(t *testing.T) {
	s := lease.New(nil, lease.WithPrefix("p:"))
	k := s.Keys("job-1", "exec-1")
	for _, key := range []string{k.Lease, k.Done, k.Version, k.Fence, k.Running, k.Buffered, k.Deliveries} {
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
	for o, want := range map[lease.Outcome]string{lease.Acquired: "acquired", lease.AlreadyDone: "already_done", lease.Stale: "stale", lease.Held: "held", lease.Overlapping: "overlapping", lease.Waiting: "waiting", lease.Poison: "poison", 9: "outcome(9)"} {
		if o.String() != want {
			t.Errorf("%d.String() = %q, want %q", int(o), o.String(), want)
		}
	}
}
