package main

import (
	"testing"

	"go.uber.org/goleak"
)

// atExit holds what tests share across the whole run (a binary built
// once) and must remove when it ends.
var atExit []func()

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) {
		for _, f := range atExit {
			f()
		}
	}))
}
