package jobspec

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// StoredSpec is what a jobs row keeps in its spec column for job: the job
// without next_fire_time and remaining_runs, which the row's own columns
// (next_fire_at, runs_staged) track, so the prefetcher moves them without
// rewriting spec. job is not changed. The api's store writes rows with it,
// and testkit's bulk loads encode theirs the same way.
func StoredSpec(job *sundialv1.Job) ([]byte, error) {
	c := proto.Clone(job).(*sundialv1.Job)
	c.NextFireTime = nil
	c.RemainingRuns = 0
	b, err := proto.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("jobspec: encode spec of job %q: %w", job.GetId(), err)
	}
	return b, nil
}

// StoredLabels is what a jobs row keeps in its labels column: job's
// labels, never NULL (an empty map when it has none), so label filters and
// equality need no NULL case.
func StoredLabels(job *sundialv1.Job) map[string]string {
	if job.GetLabels() == nil {
		return map[string]string{}
	}
	return job.GetLabels()
}
