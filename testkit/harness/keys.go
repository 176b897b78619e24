package harness

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sundialhq/sundial/pkg/domain/signature"
	"github.com/sundialhq/sundial/pkg/postgres/signingkey"
)

// NewKEK returns key-encryption key material for a deployment's signing
// keys (the api's and workers' --signing-key-encryption-key-file).
func NewKEK() ([]byte, error) {
	b := make([]byte, 48)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("harness: key-encryption key: %w", err)
	}
	return []byte(base64.StdEncoding.EncodeToString(b)), nil
}

// KeySource reads every tenant's valid signing keys; *signingkey.Store is
// one.
type KeySource interface {
	Valid(ctx context.Context) (map[string][]signingkey.Key, []signingkey.Unopened, error)
}

// KeySourceFunc is a function reading the keys, as a KeySource.
type KeySourceFunc func(ctx context.Context) (map[string][]signingkey.Key, []signingkey.Unopened, error)

// Valid implements KeySource.
func (f KeySourceFunc) Valid(ctx context.Context) (map[string][]signingkey.Key, []signingkey.Unopened, error) {
	return f(ctx)
}

// Keys verifies what the workers sign with the tenants' own keys, as a
// tenant's target does with its key, for every tenant of a deployment at
// once: it reads the keys from the deployment's Postgres with its
// key-encryption key, and again when a signature names a key it does not
// hold (a tenant's first key, or a rotation). A signature by no tenant's
// key (the platform's secret alone, or none) does not verify.
type Keys struct {
	src   KeySource
	close func()

	mu   sync.Mutex
	byID map[string]signature.Key
}

// NewKeys verifies with the keys src reads.
func NewKeys(src KeySource) *Keys {
	return &Keys{src: src, close: func() {}, byID: map[string]signature.Key{}}
}

// SigningKeys verifies with the tenants' signing keys of the deployment
// in ns (sealed with its SigningKEK); Close releases its connection.
func (ns *Namespace) SigningKeys() (*Keys, error) {
	sealer, err := signingkey.NewKEK(ns.SigningKEK)
	if err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(ns.PostgresDSN)
	if err != nil {
		return nil, fmt.Errorf("harness: signing keys: %w", err)
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg) // connects at first use
	if err != nil {
		return nil, fmt.Errorf("harness: signing keys: %w", err)
	}
	k := NewKeys(signingkey.NewStore(pool, sealer))
	k.close = pool.Close
	return k, nil
}

// Close releases what SigningKeys opened.
func (k *Keys) Close() { k.close() }

// Valid reads the keys from k's source: Keys is a KeySource too, for a
// second sink of the same deployment.
func (k *Keys) Valid(ctx context.Context) (map[string][]signingkey.Key, []signingkey.Unopened, error) {
	return k.src.Valid(ctx)
}

// ErrNoTenantKey: a signature header names no tenant key.
var ErrNoTenantKey = errors.New("harness: the signature names no tenant key")

// Verify checks header as signature.VerifyKeys does, with the keys it
// names, each of which must be a tenant's.
func (k *Keys) Verify(header, executionID string, body []byte, now time.Time, tolerance time.Duration) error {
	var ids []string
	for part := range strings.SplitSeq(header, ",") {
		if id, ok := strings.CutPrefix(strings.TrimSpace(part), "kid="); ok {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return fmt.Errorf("%w: %q", ErrNoTenantKey, header)
	}
	keys, err := k.lookUp(ids)
	if err != nil {
		return err
	}
	return signature.VerifyKeys(keys, header, executionID, body, now, tolerance)
}

func (k *Keys) lookUp(ids []string) ([]signature.Key, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	held := func() (out []signature.Key, missing bool) {
		for _, id := range ids {
			key, ok := k.byID[id]
			if !ok {
				missing = true
				continue
			}
			out = append(out, key)
		}
		return out, missing
	}
	if out, missing := held(); !missing {
		return out, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	valid, _, err := k.src.Valid(ctx)
	if err != nil {
		return nil, fmt.Errorf("harness: read the signing keys: %w", err)
	}
	for _, keys := range valid {
		for _, key := range keys {
			k.byID[key.ID] = signature.Key{ID: key.ID, Secret: key.Secret}
		}
	}
	out, _ := held()
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: %v", ErrNoTenantKey, ids)
	}
	return out, nil
}
