package app

import (
	"strings"
	"testing"
	"time"

	"github.com/sundialhq/sundial/pkg/domain/quotas"
	"github.com/sundialhq/sundial/pkg/postgres/ledgerttl"
)

func TestLedgerTTLsOfTheQuotasFile(t *testing.T) {
	f, err := quotas.ParseFile([]byte("defaults:\n  ledger_ttl: 720h\ntenants:\n  acme:\n    ledger_ttl: 2h\n  globex:\n    max_jobs: 5\n"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := ledgerTTLsOf(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[ledgerttl.Default] != 720*time.Hour || got["acme"] != 2*time.Hour {
		t.Fatalf("%v", got)
	}
	if g := got.For("globex"); g != 720*time.Hour {
		t.Fatalf("globex: %s", g)
	}
	f, err = quotas.ParseFile([]byte("tenants:\n  acme:\n    ledger_ttl: 10m\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ledgerTTLsOf(f); err == nil || !strings.Contains(err.Error(), "ledger_ttl of tenant acme") {
		t.Fatalf("a 10m TTL: %v", err)
	}
}
