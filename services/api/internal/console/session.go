package console

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"time"
)

// sessions seals a bearer token into the session cookie and checks CSRF
// tokens.
//
// The cookie holds the token encrypted and authenticated with AES-256-GCM
// under the console's key, with an expiry: the browser keeps an opaque
// value it cannot read or forge, and the api stays stateless (any replica
// with the same key serves the session). The token itself is checked again
// on every call by the gRPC server's interceptor, so removing a token from
// the api's configuration ends its sessions at the next restart.
//
// The CSRF token is an HMAC of the cookie's value under a key derived from
// the console's key: it is bound to the session, needs no storage, and a
// page of another origin can neither read it nor compute it.
type sessions struct {
	aead    cipher.AEAD
	csrfKey []byte
	ttl     time.Duration
}

func newSessions(key []byte, ttl time.Duration) (*sessions, error) {
	if len(key) < 32 {
		return nil, errors.New("console: the session key must be at least 32 bytes")
	}
	// One key in, two keys out: encryption and CSRF MACs never share one.
	enc := hmac.New(sha256.New, key)
	enc.Write([]byte("sundial console session v1"))
	block, err := aes.NewCipher(enc.Sum(nil))
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte("sundial console csrf v1"))
	return &sessions{aead: aead, csrfKey: mac.Sum(nil), ttl: ttl}, nil
}

// seal makes a cookie value carrying token until now+ttl.
func (s *sessions) seal(token string, now time.Time) (string, error) {
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	plain := binary.BigEndian.AppendUint64(nil, uint64(now.Add(s.ttl).Unix()))
	plain = append(plain, token...)
	return base64.RawURLEncoding.EncodeToString(s.aead.Seal(nonce, nonce, plain, nil)), nil
}

// open returns the token of a cookie value that is intact and unexpired.
func (s *sessions) open(value string, now time.Time) (string, bool) {
	raw, err := base64.RawURLEncoding.DecodeString(value)
	if err != nil || len(raw) < s.aead.NonceSize() {
		return "", false
	}
	plain, err := s.aead.Open(nil, raw[:s.aead.NonceSize()], raw[s.aead.NonceSize():], nil)
	if err != nil || len(plain) < 9 {
		return "", false
	}
	if now.Unix() >= int64(binary.BigEndian.Uint64(plain[:8])) {
		return "", false
	}
	return string(plain[8:]), true
}

// csrf is the CSRF token of the session whose cookie value is given.
func (s *sessions) csrf(cookie string) string {
	m := hmac.New(sha256.New, s.csrfKey)
	m.Write([]byte(cookie))
	return hex.EncodeToString(m.Sum(nil)[:16])
}

// checkCSRF reports whether got is the session's CSRF token.
func (s *sessions) checkCSRF(cookie, got string) bool {
	return got != "" && hmac.Equal([]byte(s.csrf(cookie)), []byte(got))
}
