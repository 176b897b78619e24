package consumer

import (
	"testing"
	"time"
)

func TestRetryBackoffStaysUnderAQuarterOfTheSession(t *testing.T) {
	limit := 500 * time.Millisecond // a 2 s session timeout's quarter
	b := retryBackoff(limit)
	for tries := 0; tries < 100; tries++ {
		nominal := min(100*time.Millisecond<<max(tries-1, 0), limit)
		if tries >= 16 {
			nominal = limit
		}
		for range 50 {
			d := b(tries)
			if d > limit || d > nominal || d < nominal*4/5 {
				t.Fatalf("try %d: backoff %s, want within [%s, %s]", tries, d, nominal*4/5, nominal)
			}
		}
	}
	if d := retryBackoff(0)(3); d > 100*time.Millisecond || d < 80*time.Millisecond {
		t.Fatalf("a zero limit: %s, want the 100 ms floor", d)
	}
}
