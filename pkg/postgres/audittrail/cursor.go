package audittrail

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"maps"
	"strconv"
	"time"
)

// Cursor is where a page of a trail ends: the keyset position of its last
// entry, and the scope the page was read in (the tenant, the job or
// calendar, the filters) so a token cannot be replayed against another.
// Every audit page token is a Cursor encoded by Encode: base64url of a
// JSON object with the position under "b" (sequence), "a" (the instant in
// Unix microseconds, merged view only) and "k" (the kind, merged view
// only) and each scope key beside them. The per-trail RPCs have always
// issued tokens of that shape (their scope keys: "j" the job, "t" the
// tenant, "c" the calendar), so tokens issued before keep working.
type Cursor struct {
	// Seq is the last entry's sequence in its trail.
	Seq int64
	// At and Kind place the last entry in the merged view (List); a
	// per-trail page (Trail) leaves them zero.
	At   time.Time
	Kind Kind
	// Scope holds what the token is valid for, under keys other than
	// "a", "b" and "k".
	Scope map[string]string
}

// Errors of Decode; a caller answers them as invalid page tokens.
var (
	// ErrNotIssued: the token is not one a server issued.
	ErrNotIssued = errors.New("audittrail: is not a token this server issued")
	// ErrOtherScope: the token was issued for another scope.
	ErrOtherScope = errors.New("audittrail: was issued for another scope")
)

// Encode returns c's page token.
func (c Cursor) Encode() string {
	m := make(map[string]any, len(c.Scope)+3)
	for k, v := range c.Scope {
		m[k] = v
	}
	m["b"] = c.Seq
	if !c.At.IsZero() {
		m["a"] = c.At.UnixMicro()
		m["k"] = string(c.Kind)
	}
	b, _ := json.Marshal(m)
	return base64.RawURLEncoding.EncodeToString(b)
}

// Decode reads tok as a cursor of scope: ErrNotIssued when it is not a
// cursor, ErrOtherScope when it is one of another scope.
func Decode(tok string, scope map[string]string) (Cursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return Cursor{}, ErrNotIssued
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(b, &m) != nil {
		return Cursor{}, ErrNotIssued
	}
	var c Cursor
	if json.Unmarshal(m["b"], &c.Seq) != nil || c.Seq <= 0 {
		return Cursor{}, ErrNotIssued
	}
	if a, ok := m["a"]; ok {
		var us int64
		var k string
		if json.Unmarshal(a, &us) != nil || json.Unmarshal(m["k"], &k) != nil {
			return Cursor{}, ErrNotIssued
		}
		if _, err := tableOf(Kind(k)); err != nil {
			return Cursor{}, ErrNotIssued
		}
		c.At, c.Kind = time.UnixMicro(us).UTC(), Kind(k)
	}
	c.Scope = map[string]string{}
	for k, raw := range m {
		if k == "a" || k == "b" || k == "k" {
			continue
		}
		var v string
		if json.Unmarshal(raw, &v) != nil {
			return Cursor{}, ErrNotIssued
		}
		c.Scope[k] = v
	}
	want := map[string]string{}
	for k, v := range scope {
		// A scope value the issuer left empty is absent from older
		// tokens only when omitted; treat "" and absent alike.
		if v != "" {
			want[k] = v
		}
	}
	got := maps.Clone(c.Scope)
	maps.DeleteFunc(got, func(_, v string) bool { return v == "" })
	if !maps.Equal(got, want) {
		return Cursor{}, ErrOtherScope
	}
	return c, nil
}

// SeqToken and DecodeSeqToken are the token trail's and the refused-call
// trail's older page token: base64url of the decimal sequence, no scope.
// They stay readable and issued as they were, so clients holding them
// keep paging.
func SeqToken(seq int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(seq, 10)))
}

// DecodeSeqToken reads a SeqToken: ErrNotIssued when it is not one.
func DecodeSeqToken(tok string) (int64, error) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return 0, ErrNotIssued
	}
	seq, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil || seq <= 0 {
		return 0, ErrNotIssued
	}
	return seq, nil
}
