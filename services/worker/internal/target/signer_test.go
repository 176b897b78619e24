package target

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/domain/signature"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// tenantKeys signs as the worker's keyring does: each tenant's own keys,
// the platform secret for the others.
type tenantKeys map[string][]signature.Key

func (k tenantKeys) Sign(tenant string, ts time.Time, id string, body []byte) string {
	if keys, ok := k[tenant]; ok {
		return signature.SignKeys(keys, ts, id, body)
	}
	return signature.Sign(secret, ts, id, body)
}

// With a signer, both deliveries sign with the firing's tenant's keys:
// the tenant's key verifies, the platform secret does not.
func TestDeliveriesSignWithTheTenantsKeys(t *testing.T) {
	acme := signature.Key{ID: "k-acme", Secret: []byte("sdk_acme")}
	signer := tenantKeys{"acme": {acme}}

	var got http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = r.Header.Clone() }))
	defer srv.Close()
	f := httpEnvelope(srv.URL, nil)
	f.Tenant = "acme"
	if res := NewHTTP(srv.Client(), secret, WithSigner(signer)).Fire(context.Background(), Request{Firing: f, SentAt: sent}); !res.OK {
		t.Fatalf("http: %+v", res)
	}
	p := &fakeProducer{}
	kf := envelope(&sundialv1.Target{Kind: &sundialv1.Target_Kafka{Kafka: &sundialv1.KafkaTarget{Topic: "billing.ticks"}}}, false)
	kf.Tenant = "acme"
	if res := NewKafka(p, secret, "sundial.", nil, WithKafkaSigner(signer)).Fire(context.Background(), Request{Firing: kf, SentAt: sent}); !res.OK {
		t.Fatalf("kafka: %+v", res)
	}
	var kafkaSig string
	for _, h := range p.got[0].Headers {
		if h.Key == firing.HeaderSignature {
			kafkaSig = string(h.Value)
		}
	}
	for name, sig := range map[string]string{"http": got.Get(firing.HeaderSignature), "kafka": kafkaSig} {
		if err := signature.VerifyKeys([]signature.Key{acme}, sig, "exec-1", []byte(`{"a":1}`), sent, time.Minute); err != nil {
			t.Errorf("%s: the tenant's key: %v (%q)", name, err, sig)
		}
		if err := signature.Verify(secret, sig, "exec-1", []byte(`{"a":1}`), sent, time.Minute); !errors.Is(err, signature.ErrMismatch) {
			t.Errorf("%s: the platform secret verifies: %v", name, err)
		}
	}
	// Another tenant's firing: the platform secret, as without a signer.
	f.Tenant = "globex"
	if res := NewHTTP(srv.Client(), secret, WithSigner(signer)).Fire(context.Background(), Request{Firing: f, SentAt: sent}); !res.OK {
		t.Fatalf("http: %+v", res)
	}
	if err := signature.Verify(secret, got.Get(firing.HeaderSignature), "exec-1", []byte(`{"a":1}`), sent, time.Minute); err != nil {
		t.Fatalf("globex: %v", err)
	}
}
