package topiccheck

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestNewNeedsBrokers(t *testing.T) {
	if _, err := New(nil); err == nil {
		t.Fatal("New without brokers: want an error")
	}
}
