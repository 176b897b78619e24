package testinfra

import (
	"testing"

	"go.uber.org/goleak"
)

// Every helper closes what it opened when its test ends; goleak holds it to that.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
