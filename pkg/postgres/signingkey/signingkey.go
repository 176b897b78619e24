// Package signingkey keeps each tenant's webhook signing keys: created and
// rotated through the api, stored in Postgres (table signing_keys), used by
// the workers to sign what they send for that tenant (pkg/domain/signature).
//
// # Keys, rotation and the overlap
//
// A tenant has at most two valid keys. It gets its first with its first
// job: the api makes it in the job's transaction (EnsureTx), and a worker
// firing for a tenant that has jobs but no key makes it then (Ensure), so
// no tenant is signed for with a secret shared by all. Such a key is not
// shown until the tenant asks for it: its first Create returns it, once
// (a tenant that asks before its first job gets a new key the same way).
// Rotate makes a new current key and keeps the previous one valid for an
// overlap (DefaultOverlap unless asked otherwise; zero ends it at once,
// for a key that leaked); a rotation during an overlap ends the older
// overlap at once, so there are never three. Workers sign every request
// with each valid key, the current first, naming each by its id
// (signature.SignKeys), so a target that verifies with either key passes
// throughout the overlap: it can swap its key at any moment within it.
// A rotation overlaps with the tenant's previous key only, never with the
// platform's secret.
//
// # At rest
//
// A key's secret is sealed with AES-256-GCM under a key-encryption key
// the operators give the api and the workers (a file; the AES key is the
// SHA-256 of its content), with "<tenant>\x00<key id>" as associated data:
// Postgres, its backups and its logs hold no usable key, and a sealed
// secret moved to another row does not open. The secret is shown once,
// in the answer to Create or Rotate; List shows ids and validity only.
package signingkey

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// DefaultOverlap is how long the previous key stays valid after a
// rotation when the caller does not say.
const DefaultOverlap = 24 * time.Hour

// MaxOverlap bounds the overlap: a rotated-out key should not live on.
const MaxOverlap = 30 * 24 * time.Hour

// SecretPrefix starts every secret, so one found in a file or a paste is
// recognisable as a Sundial signing key.
const SecretPrefix = "sdk_"

// MinKEKBytes is the least a key-encryption key file must hold.
const MinKEKBytes = 32

// KEK is the key-encryption key sealing secrets at rest.
type KEK struct{ aead cipher.AEAD }

// LoadKEK reads a key-encryption key file (at least MinKEKBytes after a
// trailing newline is dropped: `openssl rand -base64 48 > kek` is one).
func LoadKEK(path string) (*KEK, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("signingkey: key-encryption key: %w", err)
	}
	return NewKEK([]byte(strings.TrimRight(string(b), "\r\n")))
}

// NewKEK derives the AES-256 key from material.
func NewKEK(material []byte) (*KEK, error) {
	if len(material) < MinKEKBytes {
		return nil, fmt.Errorf("signingkey: key-encryption key has %d bytes, at least %d needed", len(material), MinKEKBytes)
	}
	k := sha256.Sum256(material)
	block, err := aes.NewCipher(k[:])
	if err != nil {
		return nil, fmt.Errorf("signingkey: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("signingkey: %w", err)
	}
	return &KEK{aead: aead}, nil
}

func aad(tenant, keyID string) []byte { return []byte(tenant + "\x00" + keyID) }

// Seal encrypts secret for the row (tenant, keyID): nonce || ciphertext.
func (k *KEK) Seal(tenant, keyID string, secret []byte) ([]byte, error) {
	nonce := make([]byte, k.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("signingkey: nonce: %w", err)
	}
	return k.aead.Seal(nonce, nonce, secret, aad(tenant, keyID)), nil
}

// ErrSealed: a sealed secret does not open — another key-encryption key
// sealed it, or the row was altered or moved.
var ErrSealed = errors.New("signingkey: sealed secret does not open with this key-encryption key")

// Open decrypts what Seal returned for the same row.
func (k *KEK) Open(tenant, keyID string, sealed []byte) ([]byte, error) {
	n := k.aead.NonceSize()
	if len(sealed) < n {
		return nil, ErrSealed
	}
	out, err := k.aead.Open(nil, sealed[:n], sealed[n:], aad(tenant, keyID))
	if err != nil {
		return nil, ErrSealed
	}
	return out, nil
}

// NewSecret returns a fresh secret: SecretPrefix and 32 random bytes,
// base64url. Targets use the whole string, as UTF-8 bytes, as the HMAC key.
func NewSecret() ([]byte, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("signingkey: %w", err)
	}
	return []byte(SecretPrefix + base64.RawURLEncoding.EncodeToString(b)), nil
}

// NewKeyID returns a key id: "k" and the creation date, then random hex,
// so ids sort roughly by age and say when a key was made.
func NewKeyID(now time.Time) (string, error) {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("signingkey: %w", err)
	}
	return "k" + now.UTC().Format("20060102") + "-" + hex.EncodeToString(b), nil
}
