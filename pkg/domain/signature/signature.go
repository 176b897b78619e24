// Package signature signs the requests Sundial sends to targets, and lets a
// target (or a test sink) verify them.
//
// A signature covers the send time, the execution id and the body, so a
// captured request cannot be replayed for another execution, nor much later
// for the same one: Verify rejects a timestamp outside its tolerance. The
// header value has the form
//
//	t=<unix seconds>,v1=<hex HMAC-SHA256>
//
// where the MAC is computed with the shared secret over
// "<unix seconds>.<execution id>.<body>". The "v1" name leaves room for a
// second scheme (or a second secret during a rotation): Verify accepts the
// header when any v1 value matches.
//
// # Key ids
//
// A tenant's own keys (pkg/postgres/signingkey) have ids, and a request is signed
// with each key valid at the time — two during a rotation's overlap — each
// signature preceded by the id of the key that made it:
//
//	t=<unix seconds>,kid=<key id>,v1=<hex>,kid=<previous key id>,v1=<hex>
//
// A verifier holding one key finds the v1 that follows its key's id
// (VerifyKeys), or simply tries every v1 (Verify, which ignores kid): both
// pass while either key is valid. The MAC input is the same with or
// without ids.
//
// The '.' separators keep the three parts apart only because neither a
// decimal timestamp nor an execution id (a UUID) contains one; Verify
// refuses an execution id that does, since "<t>.<id>.<x>.<rest>" would
// otherwise let a captured request pass as execution "<id>.<x>" with the
// shorter body "<rest>".
package signature

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Scheme is the name of the only signature scheme so far.
const Scheme = "v1"

// Errors Verify returns; wrapped, so test them with errors.Is.
var (
	// ErrMalformed: the header is not of the form t=<unix>,v1=<hex>.
	ErrMalformed = errors.New("signature: malformed header")
	// ErrExpired: the timestamp is further from now than the tolerance.
	ErrExpired = errors.New("signature: timestamp outside tolerance")
	// ErrMismatch: no v1 value matches the secret, execution id and body.
	ErrMismatch = errors.New("signature: mismatch")
)

// Sign returns the header value for a request sent at ts for executionID
// with body.
func Sign(secret []byte, ts time.Time, executionID string, body []byte) string {
	unix := ts.Unix()
	return "t=" + strconv.FormatInt(unix, 10) + "," + Scheme + "=" + hex.EncodeToString(mac(secret, unix, executionID, body))
}

// Key is a signing key and its id ("" for the platform's one secret, which
// has none).
type Key struct {
	ID     string
	Secret []byte
}

// SignKeys returns the header value signed by each key, in order, each
// signature preceded by its key's id when it has one. One key without an
// id gives exactly what Sign gives.
func SignKeys(keys []Key, ts time.Time, executionID string, body []byte) string {
	unix := ts.Unix()
	b := make([]byte, 0, 16+len(keys)*(len(Scheme)+2*sha256.Size+32))
	b = append(b, "t="...)
	b = strconv.AppendInt(b, unix, 10)
	for _, k := range keys {
		if k.ID != "" {
			b = append(b, ",kid="...)
			b = append(b, k.ID...)
		}
		b = append(b, ',')
		b = append(b, Scheme...)
		b = append(b, '=')
		b = hex.AppendEncode(b, mac(k.Secret, unix, executionID, body))
	}
	return string(b)
}

// ErrUnknownKey: the header names no key the verifier holds.
var ErrUnknownKey = errors.New("signature: no signature by a key the verifier holds")

// VerifyKeys is Verify for a target holding its tenant's keys (one, or two
// during a rotation): each key checks the v1 that follows its id. A header
// whose signatures carry no ids is checked against every key.
func VerifyKeys(keys []Key, header, executionID string, body []byte, now time.Time, tolerance time.Duration) error {
	if strings.IndexByte(executionID, '.') >= 0 {
		return fmt.Errorf("%w: execution id contains '.'", ErrMalformed)
	}
	unix, sigs, err := parseKeyed(header)
	if err != nil {
		return err
	}
	if tolerance > 0 {
		if d := now.Sub(time.Unix(unix, 0)); d > tolerance || d < -tolerance {
			return fmt.Errorf("%w: signed at %d, now %d", ErrExpired, unix, now.Unix())
		}
	}
	named := false
	for _, s := range sigs {
		for _, k := range keys {
			if s.kid != "" && k.ID != "" && s.kid != k.ID {
				continue // a key without an id is tried against every signature
			}
			named = true
			if hmac.Equal(s.mac, mac(k.Secret, unix, executionID, body)) {
				return nil
			}
		}
	}
	if !named {
		return ErrUnknownKey
	}
	return ErrMismatch
}

// Verify checks header against secret, executionID and body. The timestamp
// must lie within tolerance of now in either direction (clocks differ);
// a tolerance of zero or less disables that check.
func Verify(secret []byte, header, executionID string, body []byte, now time.Time, tolerance time.Duration) error {
	if strings.IndexByte(executionID, '.') >= 0 {
		return fmt.Errorf("%w: execution id contains '.'", ErrMalformed)
	}
	unix, sigs, err := parse(header)
	if err != nil {
		return err
	}
	if tolerance > 0 {
		if d := now.Sub(time.Unix(unix, 0)); d > tolerance || d < -tolerance {
			return fmt.Errorf("%w: signed at %d, now %d", ErrExpired, unix, now.Unix())
		}
	}
	want := mac(secret, unix, executionID, body)
	for _, s := range sigs {
		if hmac.Equal(s, want) {
			return nil
		}
	}
	return ErrMismatch
}

func mac(secret []byte, unix int64, executionID string, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	// The separators keep (t, id, body) unambiguous: neither a decimal
	// timestamp nor a UUID contains a '.'.
	m.Write(strconv.AppendInt(nil, unix, 10))
	m.Write([]byte{'.'})
	m.Write([]byte(executionID))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

type keyedMAC struct {
	kid string
	mac []byte
}

// parseKeyed is parse keeping each v1's key id (the kid just before it).
func parseKeyed(header string) (unix int64, sigs []keyedMAC, err error) {
	haveT, kid := false, ""
	for part := range strings.SplitSeq(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return 0, nil, fmt.Errorf("%w: element %q has no '='", ErrMalformed, part)
		}
		switch k {
		case "t":
			unix, err = strconv.ParseInt(v, 10, 64)
			if err != nil {
				return 0, nil, fmt.Errorf("%w: timestamp %q", ErrMalformed, v)
			}
			haveT = true
		case "kid":
			kid = v
		case Scheme:
			b, err := hex.DecodeString(v)
			if err != nil || len(b) != sha256.Size {
				return 0, nil, fmt.Errorf("%w: %s value is not a hex SHA-256 MAC", ErrMalformed, Scheme)
			}
			sigs = append(sigs, keyedMAC{kid: kid, mac: b})
			kid = ""
		}
	}
	if !haveT {
		return 0, nil, fmt.Errorf("%w: no timestamp", ErrMalformed)
	}
	if len(sigs) == 0 {
		return 0, nil, fmt.Errorf("%w: no %s signature", ErrMalformed, Scheme)
	}
	return unix, sigs, nil
}

func parse(header string) (unix int64, sigs [][]byte, err error) {
	haveT := false
	for part := range strings.SplitSeq(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return 0, nil, fmt.Errorf("%w: element %q has no '='", ErrMalformed, part)
		}
		switch k {
		case "t":
			unix, err = strconv.ParseInt(v, 10, 64)
			if err != nil {
				return 0, nil, fmt.Errorf("%w: timestamp %q", ErrMalformed, v)
			}
			haveT = true
		case Scheme:
			b, err := hex.DecodeString(v)
			if err != nil || len(b) != sha256.Size {
				return 0, nil, fmt.Errorf("%w: %s value is not a hex SHA-256 MAC", ErrMalformed, Scheme)
			}
			sigs = append(sigs, b)
		default:
			// Unknown schemes are ignored so a newer sender can add one
			// without breaking older verifiers.
		}
	}
	if !haveT {
		return 0, nil, fmt.Errorf("%w: no timestamp", ErrMalformed)
	}
	if len(sigs) == 0 {
		return 0, nil, fmt.Errorf("%w: no %s signature", ErrMalformed, Scheme)
	}
	return unix, sigs, nil
}
