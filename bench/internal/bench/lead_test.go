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

// TestQuickLeadCoversARegistrationAtLessThanHalfItsRate: in CI the quick
// burst's 605 jobs registered at 68 jobs/s after a calibration of 157,
// beside chaos-quick's registration; the lead must still leave the 2 s
// margin, and stay short.
func TestQuickLeadCoversARegistrationAtLessThanHalfItsRate(t *testing.T) {
	r := &Runner{opts: Options{Quick: true}}
	r.noteRegistration(100, 100*time.Second/157)
	if got, need := r.lead(605), 605*time.Second/68+2*time.Second; got < need {
		t.Errorf("quick lead for 605 jobs after a calibration at 157/s: %s, want at least %s (registered at 68/s, plus the 2 s margin)", got, need)
	}
	if got := r.lead(605); got > 15*time.Second {
		t.Errorf("quick lead for 605 jobs: %s, want at most 15 s", got)
	}
}
