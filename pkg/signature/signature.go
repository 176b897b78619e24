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
