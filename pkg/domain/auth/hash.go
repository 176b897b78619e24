package auth

// argon2id hashes of bearer tokens in the PHC string format,
// "$argon2id$v=19$m=<KiB>,t=<passes>,p=<lanes>$<salt>$<hash>" (salt and
// hash in unpadded standard base64), as the api's tokens file holds them
// and `schedctl token hash` makes them. The parameters travel with each
// hash, so changing the defaults leaves every hash already written
// verifiable.

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/crypto/argon2"
)

// HashParams are argon2id's cost parameters.
type HashParams struct {
	MemoryKiB uint32
	Time      uint32
	Threads   uint8
}

// BootstrapHashParams are the parameters of a bootstrap token's hash:
// 4 MiB and 2 passes, about 5 ms on one core. Bootstrap tokens are 32
// random bytes, so the hash's cost guards against nothing a guess could
// win; it exists so that a leaked tokens file (a Secret read by the wrong
// person, a backup) does not hand out working tokens, while checking a
// presented token against every entry stays cheap.
var BootstrapHashParams = HashParams{MemoryKiB: 4 * 1024, Time: 2, Threads: 1}

// Upper bounds of a hash's parameters: a hash asking for more would make
// every check of an unknown token slow (or take the memory of a small
// pod), so ParseHash refuses it.
const (
	maxHashMemoryKiB = 64 * 1024
	maxHashTime      = 10
	maxHashThreads   = 4
	hashSaltLen      = 16
	hashKeyLen       = 32
)

// ErrNotHash is ParseHash's answer for anything that is not an argon2id
// PHC string within the bounds.
var ErrNotHash = errors.New("not an argon2id hash ($argon2id$v=19$m=...,t=...,p=...$salt$hash)")

// Hash is a parsed argon2id PHC string.
type Hash struct {
	Params HashParams
	salt   []byte
	sum    []byte
}

// HashToken returns the PHC string of token's argon2id hash with a fresh
// random salt.
func HashToken(token string, p HashParams) (string, error) {
	salt := make([]byte, hashSaltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	sum := argon2.IDKey([]byte(token), salt, p.Time, p.MemoryKiB, p.Threads, hashKeyLen)
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, p.MemoryKiB, p.Time, p.Threads,
		base64.RawStdEncoding.EncodeToString(salt), base64.RawStdEncoding.EncodeToString(sum)), nil
}

// ParseHash reads a PHC string. Its error never quotes s (which may be a
// plain token written where a hash belongs).
func ParseHash(s string) (Hash, error) {
	parts := strings.Split(s, "$")
	if len(parts) != 6 || parts[0] != "" || parts[1] != "argon2id" || parts[2] != "v="+strconv.Itoa(argon2.Version) {
		return Hash{}, ErrNotHash
	}
	var h Hash
	for _, kv := range strings.Split(parts[3], ",") {
		k, v, _ := strings.Cut(kv, "=")
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return Hash{}, ErrNotHash
		}
		switch k {
		case "m":
			h.Params.MemoryKiB = uint32(n)
		case "t":
			h.Params.Time = uint32(n)
		case "p":
			if n > 255 {
				return Hash{}, ErrNotHash
			}
			h.Params.Threads = uint8(n)
		default:
			return Hash{}, ErrNotHash
		}
	}
	p := h.Params
	if p.MemoryKiB == 0 || p.Time == 0 || p.Threads == 0 {
		return Hash{}, ErrNotHash
	}
	if p.MemoryKiB > maxHashMemoryKiB || p.Time > maxHashTime || p.Threads > maxHashThreads {
		return Hash{}, fmt.Errorf("argon2id parameters m=%d,t=%d,p=%d exceed m=%d,t=%d,p=%d: every check of a token would be slow; hash it again with `schedctl token hash`",
			p.MemoryKiB, p.Time, p.Threads, maxHashMemoryKiB, maxHashTime, maxHashThreads)
	}
	var err error
	if h.salt, err = base64.RawStdEncoding.DecodeString(parts[4]); err != nil || len(h.salt) < 8 {
		return Hash{}, ErrNotHash
	}
	if h.sum, err = base64.RawStdEncoding.DecodeString(parts[5]); err != nil || len(h.sum) < 16 || len(h.sum) > 64 {
		return Hash{}, ErrNotHash
	}
	return h, nil
}

// Matches reports whether token hashes to h, in time that does not depend
// on where the two differ.
func (h Hash) Matches(token string) bool {
	got := argon2.IDKey([]byte(token), h.salt, h.Params.Time, h.Params.MemoryKiB, h.Params.Threads, uint32(len(h.sum)))
	return subtle.ConstantTimeCompare(got, h.sum) == 1
}
