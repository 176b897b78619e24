package audittrail_test

import (
	"fmt"
	"time"

	"github.com/sundialhq/sundial/pkg/postgres/audittrail"
)

// A page of the merged view ends at its last entry; the next page starts
// after it, and only under the scope the token was issued for.
func ExampleCursor() {
	last := audittrail.Entry{Kind: audittrail.KindCalendar, Seq: 42, At: time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)}
	scope := map[string]string{"tenant": "acme", "actor": "acme/ci"}
	tok := last.Cursor(scope).Encode()

	next, err := audittrail.Decode(tok, scope)
	fmt.Println(next.Kind, next.Seq, next.At.Format(time.RFC3339), err)
	_, err = audittrail.Decode(tok, map[string]string{"tenant": "globex"})
	fmt.Println(err)
	// Output:
	// calendar 42 2026-11-28T12:00:00Z <nil>
	// audittrail: was issued for another scope
}
