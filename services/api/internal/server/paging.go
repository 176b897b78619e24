package server

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"sort"

	"github.com/google/uuid"

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
