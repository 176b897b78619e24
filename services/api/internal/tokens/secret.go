// Package tokens is the api's own bearer tokens: made,
// listed and revoked through TokenService, stored in Postgres
// (api_tokens, token_audit; migration 00015) as argon2id hashes, and
// verified for pkg/domain/auth's interceptor (Verifier).
//
// A token is "sdl_<id>_<secret>": <id> is 16 hex digits naming its row,
// <secret> 32 random bytes in unpadded base64url. Verifying one is a
// primary-key read and one argon2id check. Because argon2id is meant to
// be slow (about 20 ms and 19 MiB here), a verified token is remembered
// in memory by the SHA-256 of the whole token for CacheTTL, and at most
// two checks run at once (a flood of wrong secrets queues instead of
// taking every core). Revocation is effective on every replica within
// RevocationBound: each replica polls the revocations of the last minutes
// every PollInterval and forgets those tokens; an expiry is checked at
// every call against the cached expiry.
package tokens

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/crypto/argon2"
)

// Prefix starts every api-made token.
const Prefix = "sdl_"

// argon2id parameters for new tokens: OWASP's 19 MiB, 2 passes, 1 lane.
// Stored with each hash, so changing them leaves old tokens verifiable.
const (
	argonMemoryKiB = 19 * 1024
	argonTime      = 2
	argonThreads   = 1
	argonKeyLen    = 32
	saltLen        = 16
)

// newToken makes a token: its id and the whole "sdl_<id>_<secret>".
func newToken() (id, token string, err error) {
	var idb [8]byte
	var secret [32]byte
	if _, err := rand.Read(idb[:]); err != nil {
		return "", "", err
	}
	if _, err := rand.Read(secret[:]); err != nil {
		return "", "", err
	}
	id = hex.EncodeToString(idb[:])
	return id, Prefix + id + "_" + base64.RawURLEncoding.EncodeToString(secret[:]), nil
}

// parseToken splits "sdl_<id>_<secret>"; ok is false for anything else.
func parseToken(token string) (id, secret string, ok bool) {
	rest, ok := strings.CutPrefix(token, Prefix)
	if !ok {
		return "", "", false
	}
	id, secret, ok = strings.Cut(rest, "_")
	if !ok || len(id) != 16 || secret == "" || len(secret) > 128 {
		return "", "", false
	}
	if _, err := hex.DecodeString(id); err != nil {
		return "", "", false
	}
	return id, secret, true
}

// hashSecret is the PHC string of secret's argon2id hash with a fresh
// salt: "$argon2id$v=19$m=19456,t=2,p=1$<salt>$<hash>".
func hashSecret(secret string) (string, error) {
	salt := make([]byte, saltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	sum := argon2.IDKey([]byte(secret), salt, argonTime, argonMemoryKiB, argonThreads, argonKeyLen)
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, argonMemoryKiB, argonTime, argonThreads,
		base64.RawStdEncoding.EncodeToString(salt), base64.RawStdEncoding.EncodeToString(sum)), nil
}

var errBadHash = errors.New("tokens: stored hash is not an argon2id PHC string")

// checkSecret reports whether secret matches the PHC string, in time that
// does not depend on where they differ.
func checkSecret(phc, secret string) (bool, error) {
	parts := strings.Split(phc, "$")
	if len(parts) != 6 || parts[0] != "" || parts[1] != "argon2id" {
		return false, errBadHash
	}
	var version int
	if _, err := fmt.Sscanf(parts[2], "v=%d", &version); err != nil || version != argon2.Version {
		return false, errBadHash
	}
	var m, t uint32
	var p uint8
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &m, &t, &p); err != nil || m == 0 || m > 1<<20 || t == 0 || t > 16 || p == 0 {
		return false, errBadHash
	}
	salt, err := base64.RawStdEncoding.DecodeString(parts[4])
	if err != nil {
		return false, errBadHash
	}
	want, err := base64.RawStdEncoding.DecodeString(parts[5])
	if err != nil || len(want) == 0 {
		return false, errBadHash
	}
	got := argon2.IDKey([]byte(secret), salt, t, m, p, uint32(len(want)))
	return subtle.ConstantTimeCompare(got, want) == 1, nil
}
