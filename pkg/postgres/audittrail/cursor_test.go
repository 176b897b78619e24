package audittrail

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestCursorRoundTrip(t *testing.T) {
	at := time.Date(2026, 3, 29, 1, 30, 0, 123456000, time.UTC)
	c := Cursor{Seq: 42, At: at, Kind: KindCalendar, Scope: map[string]string{"t": "acme", "actor": "acme/ci"}}
	got, err := Decode(c.Encode(), map[string]string{"t": "acme", "actor": "acme/ci"})
	if err != nil {
		t.Fatal(err)
	}
	if got.Seq != 42 || !got.At.Equal(at) || got.Kind != KindCalendar {
		t.Fatalf("decoded %+v, want seq 42 at %s kind calendar", got, at)
	}
	if _, err := Decode(c.Encode(), map[string]string{"t": "other"}); !errors.Is(err, ErrOtherScope) {
		t.Fatalf("another tenant's scope: err %v, want ErrOtherScope", err)
	}
}

// The per-trail RPCs issued {"j": job, "b": seq} and {"t": tenant, "c":
// calendar, "b": seq} before this codec; those tokens still decode.
func TestCursorReadsTokensIssuedBefore(t *testing.T) {
	old := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	tok := old(struct {
		Job    string `json:"j"`
		Before int64  `json:"b"`
	}{"", 7})
	c, err := Decode(tok, map[string]string{"j": ""})
	if err != nil || c.Seq != 7 {
		t.Fatalf("job token: %+v %v", c, err)
	}
	tok = old(struct {
		Tenant   string `json:"t"`
		Calendar string `json:"c"`
		Before   int64  `json:"b"`
	}{"acme", "holidays", 9})
	if _, err := Decode(tok, map[string]string{"t": "acme", "c": ""}); !errors.Is(err, ErrOtherScope) {
		t.Fatalf("a calendar's token read for all calendars: %v, want ErrOtherScope", err)
	}
	if c, err := Decode(tok, map[string]string{"t": "acme", "c": "holidays"}); err != nil || c.Seq != 9 {
		t.Fatalf("calendar token: %+v %v", c, err)
	}
	if s, err := DecodeSeqToken(SeqToken(12)); err != nil || s != 12 {
		t.Fatalf("seq token: %d %v", s, err)
	}
}

func TestCursorRefusesWhatItDidNotIssue(t *testing.T) {
	for _, tok := range []string{"%%", base64.RawURLEncoding.EncodeToString([]byte("[1]")),
		base64.RawURLEncoding.EncodeToString([]byte(`{"b":0}`)),
		base64.RawURLEncoding.EncodeToString([]byte(`{"b":3,"a":1,"k":"mystery"}`)),
		base64.RawURLEncoding.EncodeToString([]byte(`{"b":3,"t":5}`))} {
		if _, err := Decode(tok, nil); !errors.Is(err, ErrNotIssued) {
			t.Errorf("Decode(%q): %v, want ErrNotIssued", tok, err)
		}
	}
	if _, err := DecodeSeqToken(base64.RawURLEncoding.EncodeToString([]byte("-4"))); !errors.Is(err, ErrNotIssued) {
		t.Errorf("negative seq token: %v", err)
	}
}

func TestRecordRefusesBadFields(t *testing.T) {
	ok := Record{Kind: KindToken, Tenant: "acme", Subject: "0123456789abcdef", Actor: "acme/admin", Action: "create"}
	if _, _, err := ok.Statement(); err != nil {
		t.Fatal(err)
	}
	for field, r := range map[string]Record{
		"kind":    {Kind: "mystery", Tenant: "acme", Subject: "x", Action: "a"},
		"tenant":  {Kind: KindJob, Subject: "x", Action: "a"},
		"subject": {Kind: KindJob, Tenant: "acme", Action: "a"},
		"action":  {Kind: KindJob, Tenant: "acme", Subject: "x"},
		"version": {Kind: KindToken, Tenant: "acme", Subject: "x", Action: "a", Version: 2},
		"detail":  {Kind: KindJob, Tenant: "acme", Subject: "x", Action: "a", Detail: []int{1}},
	} {
		_, _, err := r.Statement()
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: err %v, want one naming %s", field, err, field)
		}
	}
}

func TestRecordNilDetailIsAnEmptyObject(t *testing.T) {
	var d map[string]string
	_, args, err := Record{Kind: KindToken, Tenant: "acme", Subject: "x", Action: "create", Detail: d}.Statement()
	if err != nil || string(args[5].([]byte)) != "{}" {
		t.Fatalf("args %v err %v, want detail {}", args, err)
	}
}
