package ledgerttl_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sundialhq/sundial/pkg/postgres/ledgerttl"
	"github.com/sundialhq/sundial/pkg/store/ledger"
)

func TestForFallsBackToTheDefaultThenTheLedgers(t *testing.T) {
	var none ledgerttl.TTLs
	if got := none.For("acme"); got != ledger.TTL {
		t.Fatalf("nothing configured: %s, want %s", got, ledger.TTL)
	}
	ttls := ledgerttl.TTLs{ledgerttl.Default: 30 * 24 * time.Hour, "acme": 7 * 24 * time.Hour}
	if got := ttls.For("acme"); got != 7*24*time.Hour {
		t.Fatalf("acme: %s", got)
	}
	if got := ttls.For("other"); got != 30*24*time.Hour {
		t.Fatalf("other: %s", got)
	}
}

func TestValidateNamesTheTenant(t *testing.T) {
	for _, c := range []struct {
		ttls ledgerttl.TTLs
		want string
	}{
		{ledgerttl.TTLs{"acme": time.Minute}, "tenant acme: must be between 1h0m0s and 2160h0m0s"},
		{ledgerttl.TTLs{ledgerttl.Default: 91 * 24 * time.Hour}, "the default: must be between"},
		{ledgerttl.TTLs{"acme": 2*time.Hour + time.Millisecond}, "tenant acme: must be whole seconds"},
	} {
		err := c.ttls.Validate()
		if !errors.Is(err, ledgerttl.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.ttls, err, c.want)
		}
	}
	if err := (ledgerttl.TTLs{"acme": ledger.MinTTL, ledgerttl.Default: ledger.MaxTTL}).Validate(); err != nil {
		t.Fatal(err)
	}
}
