package main

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestSplitList(t *testing.T) {
	got := splitList(" a:1, ,b ,")
	if len(got) != 2 || got[0] != "a:1" || got[1] != "b" {
		t.Fatalf("splitList = %q", got)
	}
}
