package bench

import (
	"testing"
	"time"
)

// TestLeadCoversALargeRegistrationThatSlows: the burst's 100,000 one-off
// jobs registered at about 360 jobs/s after a calibration of 572; the lead
// must still leave the bench's 2 s margin, while a small registration
// keeps its short lead.
func TestLeadCoversALargeRegistrationThatSlows(t *testing.T) {
	r := &Runner{}
	r.noteRegistration(500, 500*time.Second/572)
	slow := 100_000 * time.Second / 360
	if got := r.lead(100_000); got < slow+2*time.Second {
		t.Errorf("lead for 100,000 jobs after a calibration at 572/s: %s, want at least %s (registered at 360/s) plus the 2 s margin", got, slow)
	}
	if got, most := r.lead(1_000), 1000*time.Second/572*3/2+3*time.Second; got > most {
		t.Errorf("lead for 1,000 jobs: %s, want at most %s", got, most)
	}
}
