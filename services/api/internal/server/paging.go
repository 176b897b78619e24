package server

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"sort"

	"github.com/google/uuid"

	"github.com/sundialhq/sundial/pkg/postgres/audittrail"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

const (
	defaultPageSize = 100
	maxPageSize     = 1000
)

// pageSize applies the default and the cap; a negative size is refused.
func pageSize(field string, n int32) (int, error) {
	switch {
	case n < 0:
		return 0, invalidf(field, "must not be negative, got %d", n)
	case n == 0:
		return defaultPageSize, nil
	case n > maxPageSize:
		return maxPageSize, nil
	}
	return int(n), nil
}

// listCursor is what a ListJobs page token carries: where the previous page
// ended, and a digest of the filters it was issued for, so a token cannot be
// replayed against a different query. Tokens are opaque to clients; the
// encoding (base64url of JSON) may change.
type listCursor struct {
	After  string `json:"a"`
	Filter string `json:"f"`
}

func listFilterDigest(status sundialv1.JobStatus, labels map[string]string, nameContains string) string {
	h := sha256.New()
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(status))
	h.Write(b[:])
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		// Length-prefixed so {"a":"bc"} and {"ab":"c"} differ.
		binary.BigEndian.PutUint32(b[:], uint32(len(k)))
		h.Write(b[:])
		h.Write([]byte(k))
		binary.BigEndian.PutUint32(b[:], uint32(len(labels[k])))
		h.Write(b[:])
		h.Write([]byte(labels[k]))
	}
	if nameContains != "" {
		// Only when set, so tokens issued before name search stay valid.
		h.Write([]byte{0xff})
		h.Write([]byte(nameContains))
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

func encodeCursor(c listCursor) string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(tok, filter string) (listCursor, error) {
	var c listCursor
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil || json.Unmarshal(b, &c) != nil || uuid.Validate(c.After) != nil {
		return c, invalidf("page_token", "is not a token this server issued")
	}
	if c.Filter != filter {
		return c, invalidf("page_token", "was issued for different filters; repeat the query's status and labels, or start over without a token")
	}
	return c, nil
}

// auditCursor reads a page token of an audit trail RPC, issued for scope
// by audittrail's one cursor codec (the per-trail RPCs' and ListAudit's
// tokens alike); "" is the first page, the zero Cursor. Every refusal is
// InvalidArgument on page_token: a token of another scope "was issued for
// <otherScope>"; anything else, or a per-trail token given to the merged
// view (merged), is not a token this server (ListAudit) issued.
func auditCursor(tok string, scope map[string]string, merged bool, otherScope string) (audittrail.Cursor, error) {
	if tok == "" {
		return audittrail.Cursor{}, nil
	}
	c, err := audittrail.Decode(tok, scope)
	switch {
	case errors.Is(err, audittrail.ErrOtherScope):
		return audittrail.Cursor{}, invalidf("page_token", "was issued for %s", otherScope)
	case merged && (err != nil || c.At.IsZero()):
		return audittrail.Cursor{}, invalidf("page_token", "is not a token ListAudit issued")
	case err != nil:
		return audittrail.Cursor{}, invalidf("page_token", "is not a token this server issued")
	}
	return c, nil
}

// auditPage cuts entries, read with one more than size to learn whether
// there is a next page, to the page, and returns the next page's token
// (cursor of its last entry), "" after the last page.
func auditPage[E any](entries []E, size int, cursor func(E) audittrail.Cursor) ([]E, string) {
	if len(entries) <= size {
		return entries, ""
	}
	entries = entries[:size]
	return entries, cursor(entries[size-1]).Encode()
}
