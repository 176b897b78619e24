//go:build integration

package httpapi_test

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sundialhq/sundial/pkg/postgres/signingkey"
	"github.com/sundialhq/sundial/services/api/internal/apitest"
)

// Per-tenant signing keys over HTTP/JSON (and so over gRPC, which the
// gateway calls), against real Postgres: create once, rotate with an
// overlap, list; each tenant sees only its own keys; bad input is refused
// by field and writes nothing; the secret is stored sealed only.
func TestIntegrationHTTPSigningKeys(t *testing.T) {
	api := apitest.Start(t, apitest.Options{})

	code, out, _ := call(t, api, http.MethodPost, "/v1/signing-keys", apitest.TokenAcme, `{}`)
	key, _ := out["key"].(map[string]any)
	secret, _ := out["secret"].(string)
	if code != http.StatusOK || !strings.HasPrefix(secret, signingkey.SecretPrefix) || key["current"] != true || key["created_by"] != "acme/ops" {
		t.Fatalf("create: %d %v", code, out)
	}
	// The platform secret never signs beside a key: no overlap with it,
	// and asking for one is refused by field.
	if _, ok := key["platform_overlap_end_time"]; ok {
		t.Fatalf("platform overlap of the first key: %v", key)
	}
	for _, body := range []string{`{"platform_overlap": "-1s"}`, `{"platform_overlap": "86400s"}`} {
		if code, out, _ := call(t, api, http.MethodPost, "/v1/signing-keys", apitest.TokenGlobex, body); code != http.StatusBadRequest ||
			!strings.Contains(out["message"].(string), "platform_overlap:") {
			t.Fatalf("%s: %d %v", body, code, out)
		}
	}
	first, _ := key["key_id"].(string)
	var sealed []byte
	if err := api.Pool.QueryRow(context.Background(), `SELECT sealed FROM signing_keys WHERE key_id = $1`, first).Scan(&sealed); err != nil || bytes.Contains(sealed, []byte(secret)) {
		t.Fatalf("stored in the clear, or not at all (%v)", err)
	}
	if code, out, _ := call(t, api, http.MethodPost, "/v1/signing-keys", apitest.TokenAcme, `{}`); code != http.StatusConflict {
		t.Fatalf("second create: %d %v", code, out)
	}
	if code, out, _ := call(t, api, http.MethodPost, "/v1/signing-keys:rotate", apitest.TokenGlobex, `{}`); code != http.StatusBadRequest ||
		!strings.Contains(out["message"].(string), "create one first") {
		t.Fatalf("rotate without a key: %d %v", code, out)
	}
	for _, bad := range []string{`{"overlap": "-5s"}`, `{"overlap": "2592001s"}`} {
		code, out, _ := call(t, api, http.MethodPost, "/v1/signing-keys:rotate", apitest.TokenAcme, bad)
		if code != http.StatusBadRequest || !strings.Contains(out["message"].(string), "overlap:") {
			t.Fatalf("rotate %s: %d %v", bad, code, out)
		}
	}
	var n int
	if err := api.Pool.QueryRow(context.Background(), `SELECT count(*) FROM signing_keys`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("refused calls wrote keys: %d %v", n, err)
	}

	code, out, _ = call(t, api, http.MethodPost, "/v1/signing-keys:rotate", apitest.TokenAcme, `{"overlap": "3600s"}`)
	key, _ = out["key"].(map[string]any)
	prev, _ := out["previous"].(map[string]any)
	newSecret, _ := out["secret"].(string)
	if code != http.StatusOK || prev["key_id"] != first || prev["current"] == true || key["key_id"] == first || newSecret == secret || newSecret == "" {
		t.Fatalf("rotate: %d %v", code, out)
	}
	created, _ := time.Parse(time.RFC3339Nano, key["create_time"].(string))
	expires, _ := time.Parse(time.RFC3339Nano, prev["expire_time"].(string))
	if expires.Sub(created) != time.Hour {
		t.Fatalf("overlap %s", expires.Sub(created))
	}

	code, out, _ = call(t, api, http.MethodGet, "/v1/signing-keys", apitest.TokenAcme, "")
	keys, _ := out["keys"].([]any)
	if code != http.StatusOK || len(keys) != 2 || keys[0].(map[string]any)["key_id"] != key["key_id"] || keys[1].(map[string]any)["key_id"] != first {
		t.Fatalf("list: %d %v", code, out)
	}
	for _, k := range keys {
		if _, ok := k.(map[string]any)["secret"]; ok {
			t.Fatalf("list shows a secret: %v", k)
		}
	}
	if code, out, _ := call(t, api, http.MethodGet, "/v1/signing-keys", apitest.TokenGlobex, ""); code != http.StatusOK || len(out) != 0 {
		t.Fatalf("globex sees acme's keys: %d %v", code, out)
	}
	if code, _, _ := call(t, api, http.MethodGet, "/v1/signing-keys", "", ""); code != http.StatusUnauthorized {
		t.Fatalf("no token: %d", code)
	}

	// What the workers read opens with the same key-encryption key.
	valid, bad, err := signingkey.NewStore(api.Pool, api.SigningKEK).Valid(context.Background())
	if err != nil || len(bad) != 0 || len(valid["acme"]) != 2 || string(valid["acme"][0].Secret) != newSecret || string(valid["acme"][1].Secret) != secret {
		t.Fatalf("valid keys: %v %v", bad, err)
	}
}
