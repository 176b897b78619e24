package ledger

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// gocql runs schema and topology event handlers in goroutines of
		// their own that Session.Close does not wait for; after a DROP
		// KEYSPACE on a busy node one can outlive the test by seconds.
		goleak.IgnoreAnyFunction("github.com/gocql/gocql.(*Session).handleSchemaEvent"),
		goleak.IgnoreAnyFunction("github.com/gocql/gocql.(*Session).handleNodeEvent"),
	)
}
