//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sundialhq/sundial/pkg/domain/firing"
	"github.com/sundialhq/sundial/pkg/postgres/instances"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
	"github.com/sundialhq/sundial/testkit/harness"
	"github.com/sundialhq/sundial/testkit/testinfra"
)

var priorities = []sundialv1.Priority{
	sundialv1.Priority_PRIORITY_CRITICAL,
	sundialv1.Priority_PRIORITY_HIGH,
	sundialv1.Priority_PRIORITY_MEDIUM,
	sundialv1.Priority_PRIORITY_LOW,
}

// jobPlan is one job to register.
type jobPlan struct {
	name     string
	cron     string
	rrule    string // in Asia/Kolkata, DTSTART the run's start
	once     time.Time
	priority sundialv1.Priority
	kafka    bool
}

func (jp jobPlan) proto(s *sink, kafkaTopic string, start, end time.Time) *sundialv1.Job {
	job := &sundialv1.Job{
		Name:     jp.name,
		Labels:   map[string]string{"suite": "e2e"},
		Priority: jp.priority,
		Payload:  []byte(`{"job":"` + jp.name + `"}`),
		Schedule: &sundialv1.Schedule{Timezone: "UTC"},
	}
	switch {
	case jp.cron != "":
		job.Schedule.Spec = &sundialv1.Schedule_Cron{Cron: jp.cron}
		job.Schedule.StartTime = timestamppb.New(start)
		job.Schedule.EndTime = timestamppb.New(end)
	case jp.rrule != "":
		job.Schedule.Spec = &sundialv1.Schedule_Rrule{Rrule: jp.rrule}
		job.Schedule.Timezone = "Asia/Kolkata"
		job.Schedule.StartTime = timestamppb.New(start)
		job.Schedule.EndTime = timestamppb.New(end)
	default:
		job.Schedule.Spec = &sundialv1.Schedule_Once{Once: timestamppb.New(jp.once)}
	}
	if jp.kafka {
		job.Target = &sundialv1.Target{Kind: &sundialv1.Target_Kafka{Kafka: &sundialv1.KafkaTarget{Topic: kafkaTopic}}}
	} else {
		job.Target = &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: s.url()}}}
	}
	return job
}

// register creates the jobs over gRPC (a few at a time) and returns the
// slots each will fire, computed with the same engine from what the api
// returned.
func (p *platform) register(t *testing.T, plans []jobPlan, s *sink, kafkaTopic string, start, end time.Time) (harness.Expected, map[string]*sundialv1.Job) {
	t.Helper()
	return p.registerRetrying(t, plans, s, kafkaTopic, start, end, 0)
}

// registerRetrying is register that, for up to retryFor, calls again
// after a call the api answered Unavailable (its store failing over), as
// a client should: the idempotency keys make a repeated creation return
// the job already made.
func (p *platform) registerRetrying(t *testing.T, plans []jobPlan, s *sink, kafkaTopic string, start, end time.Time, retryFor time.Duration) (harness.Expected, map[string]*sundialv1.Job) {
	t.Helper()
	ctx := ctxT(t, 2*time.Minute)
	deadline := time.Now().Add(retryFor)
	var created []*sundialv1.Job
	for {
		var err error
		created, err = harness.CreateJobs(ctx, p.client(), len(plans), 8, func(i int) *sundialv1.CreateJobRequest {
			return &sundialv1.CreateJobRequest{Job: plans[i].proto(s, kafkaTopic, start, end), IdempotencyKey: fmt.Sprintf("e2e-%s-%d", plans[i].name, i)}
		})
		if err == nil {
			break
		}
		if status.Code(err) != codes.Unavailable || time.Now().After(deadline) {
			t.Fatal(err)
		}
		t.Logf("register: %v; again", err)
		time.Sleep(200 * time.Millisecond)
	}
	want := harness.Expected{}
	jobs := map[string]*sundialv1.Job{}
	for _, job := range created {
		jobs[job.GetId()] = job
		if _, err := want.AddJob(job, time.Time{}, end); err != nil {
			t.Fatal(err)
		}
	}
	return want, jobs
}

// awaitDeliveries waits until every expected slot arrived, then for a quiet
// period in which late duplicates would show.
func awaitDeliveries(t *testing.T, s *sink, want harness.Expected, deadline time.Time) {
	t.Helper()
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if err := s.Await(ctx, want, 0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // a window for duplicates to surface, not synchronisation
}

// checkDeliveries asserts each expected slot arrived once (or, with
// allowDuplicates, at least once), nothing unexpected arrived, signatures
// verify, and every lease of a job got its own fence token. When firings ran
// in slot order (no crash delayed a backlog that then fired at once), fences
// must also increase in slot order. It returns the number of raw duplicate
// deliveries.
func checkDeliveries(t *testing.T, s *sink, want harness.Expected, allowDuplicates, inSlotOrder bool) int {
	t.Helper()
	a := harness.Analyze(want, s.Deliveries(), nil)
	for _, p := range a.Problems {
		t.Error(p)
	}
	switch {
	case a.Missing > 0:
		t.Errorf("%d of %d expected executions never arrived", a.Missing, a.Expected)
	case a.Unexpected > 0, a.Invalid > 0, a.Mismatched > 0, a.FenceReuse > 0, a.DuplicateEffects > 0:
		t.Errorf("%d unexpected deliveries, %d with a bad identity or signature, %d with other headers or channel than expected, %d reused fences, %d slots arrived as two executions",
			a.Unexpected, a.Invalid, a.Mismatched, a.FenceReuse, a.DuplicateEffects)
	}
	if a.RawDuplicates > 0 && !allowDuplicates {
		for id, ds := range s.ByExecution() {
			if len(ds) > 1 {
				t.Errorf("execution %s (job %s slot %s) arrived %d times", id, ds[0].JobID, ds[0].Scheduled, len(ds))
			}
		}
	}
	if inSlotOrder {
		perJob := map[uuid.UUID][]harness.Delivery{}
		for _, d := range s.Deliveries() {
			perJob[d.JobID] = append(perJob[d.JobID], d)
		}
		for jobID, ds := range perJob {
			sort.Slice(ds, func(i, j int) bool { return ds[i].Scheduled.Before(ds[j].Scheduled) })
			for i := 1; i < len(ds); i++ {
				if ds[i].Fence <= ds[i-1].Fence {
					t.Errorf("job %s: fence %d at slot %s is not above fence %d at slot %s",
						jobID, ds[i].Fence, ds[i].Scheduled, ds[i-1].Fence, ds[i-1].Scheduled)
				}
			}
		}
	}
	distinct, total := s.Counts()
	t.Logf("deliveries: %d expected, %d distinct arrived, %d raw deliveries, %d raw duplicates", len(want), distinct, total, a.RawDuplicates)
	return a.RawDuplicates
}

// checkLedger waits until ListExecutions shows, for every job, a SUCCEEDED
// attempt for exactly the executions the sink saw.
func checkLedger(t *testing.T, p *platform, s *sink, jobs map[string]*sundialv1.Job) {
	t.Helper()
	got, _ := s.snapshot()
	sinkByJob := map[string]map[string]bool{}
	for id, ds := range got {
		if sinkByJob[ds[0].jobID] == nil {
			sinkByJob[ds[0].jobID] = map[string]bool{}
		}
		sinkByJob[ds[0].jobID][id] = true
	}
	ctx := ctxT(t, 3*time.Minute)
	cl := p.client()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var problems []string
		for jobID := range jobs {
			ledger := map[string]bool{}
			token := ""
			for {
				resp, err := cl.ListExecutions(ctx, &sundialv1.ListExecutionsRequest{JobId: jobID, PageSize: 1000, PageToken: token})
				if err != nil {
					t.Fatalf("ListExecutions %s: %v", jobID, err)
				}
				for _, a := range resp.GetAttempts() {
					if a.GetStatus() == sundialv1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED {
						ledger[a.GetExecutionId()] = true
					}
				}
				if token = resp.GetNextPageToken(); token == "" {
					break
				}
			}
			for id := range sinkByJob[jobID] {
				if !ledger[id] {
					problems = append(problems, fmt.Sprintf("job %s: execution %s reached the target but the ledger has no SUCCEEDED attempt", jobID, id))
				}
			}
			for id := range ledger {
				if !sinkByJob[jobID][id] {
					problems = append(problems, fmt.Sprintf("job %s: ledger says %s SUCCEEDED but the target never saw it", jobID, id))
				}
			}
		}
		if len(problems) == 0 {
			t.Logf("ledger agrees with the sink for %d jobs", len(jobs))
			return
		}
		if time.Now().After(deadline) {
			if len(problems) > 20 {
				problems = append(problems[:20], fmt.Sprintf("… and %d more", len(problems)-20))
			}
			t.Fatalf("ledger and sink disagree:\n%s", strings.Join(problems, "\n"))
		}
		time.Sleep(time.Second)
	}
}

// everyThreeSecondsRule is an RRULE firing every three seconds: an hourly
// rule at every minute and every third second. (Rules are at least
// HOURLY; BY lists make them finer.)
var everyThreeSecondsRule = func() string {
	var mins, secs []string
	for i := range 60 {
		mins = append(mins, fmt.Sprint(i))
		if i%3 == 0 {
			secs = append(secs, fmt.Sprint(i))
		}
	}
	return "FREQ=HOURLY;BYMINUTE=" + strings.Join(mins, ",") + ";BYSECOND=" + strings.Join(secs, ",")
}()

// mixedPlans is the e2e job mix: second-level crons at every priority over
// HTTP, a few over Kafka, RRULE jobs, and one-offs.
func mixedPlans(start time.Time, n int) []jobPlan {
	var plans []jobPlan
	for i := range n {
		jp := jobPlan{name: fmt.Sprintf("job-%03d", i), priority: priorities[i%len(priorities)]}
		switch {
		case i%10 == 9: // one-offs spread over the run
			jp.once = start.Add(time.Duration(1+i%15) * time.Second)
		case i%10 == 8: // Kafka target
			jp.cron = "*/2 * * * * *"
			jp.kafka = true
		case i%10 == 7: // an RFC 5545 rule: every 3 s, as "*/3 * * * * *"
			jp.rrule = everyThreeSecondsRule
		case i%10 >= 5:
			jp.cron = "*/3 * * * * *"
		default:
			jp.cron = "* * * * * *"
		}
		plans = append(plans, jp)
	}
	return plans
}

func TestFiringPipelineEndToEnd(t *testing.T) {
	t.Parallel()
	p := newPlatform(t)
	p.start("prefetcher-1", "prefetcher", "--node-id", "pf-1")
	p.start("worker-1", "worker", "--worker-id", "w1")
	p.start("worker-2", "worker", "--worker-id", "w2")

	s := newSink(t, p)
	kafkaTopic := testinfra.KafkaTopic(t, 2)
	if err := s.ReadKafka(testinfra.KafkaBrokers(t), kafkaTopic); err != nil {
		t.Fatal(err)
	}

	// 200 jobs are registered before start: 12 s, as on a saturated CI
	// machine (every core busy with other steps) registering them once
	// took more than the 6 s this lead used to be, and the last one-off
	// job's instant had passed when it was created.
	start := time.Now().Add(12 * time.Second).Truncate(time.Second)
	end := start.Add(20 * time.Second)
	want, jobs := p.register(t, mixedPlans(start, 200), s, kafkaTopic, start, end)
	t.Logf("registered %d jobs, %d slots expected between %s and %s", len(jobs), len(want), start.Format(time.TimeOnly), end.Format(time.TimeOnly))
	rruleSlots := 0
	for _, sl := range want {
		if jobs[sl.JobID.String()].GetSchedule().GetRrule() != "" {
			rruleSlots++
		}
	}
	if rruleSlots == 0 {
		t.Fatal("no RRULE job has a slot in the run")
	}
	t.Logf("%d of the slots are RRULE jobs'", rruleSlots)

	awaitDeliveries(t, s, want, end.Add(60*time.Second))
	checkDeliveries(t, s, want, false, true)
	// Every delivery verified with the key the api made with the tenant's
	// first job (the sink checks the v1 its key id names, and nothing
	// else): one key, none other.
	if valid, _, err := s.Keys().Valid(ctxT(t, 10*time.Second)); err != nil || len(valid) != 1 || len(valid["e2e"]) != 1 {
		t.Errorf("signing keys after the run: %d tenants, %d of e2e's (%v); want the one its first job made", len(valid), len(valid["e2e"]), err)
	}
	got, _ := s.snapshot()
	t.Logf("lateness at the target (received − scheduled), HTTP: %s", lateness(got, func(d delivery) bool { return d.via == "http" }))
	t.Logf("lateness at the target, Kafka target: %s", lateness(got, func(d delivery) bool { return d.via == "kafka" }))
	for _, pr := range priorities {
		t.Logf("lateness %s: %s", firing.PriorityName(pr), lateness(got, func(d delivery) bool {
			return want[uuid.MustParse(d.execID)].Priority == pr && d.via == "http"
		}))
	}
	checkLedger(t, p, s, jobs)
	checkInstancesReport(t, p, map[string][]string{"relay": {"relay-1"}, "prefetcher": {"pf-1"}, "worker": {"w1", "w2"}})

	// The firing path needs neither Postgres nor the relay once a firing is
	// in Kafka: it is kept by the workers' timers (checked by the
	// prefetcher-kill test and asserted by construction: the worker's only
	// Postgres use is the clock offset sample).
}

// checkInstancesReport waits up to 30 s for every process named in want
// (by service) and the api to have reported itself ready in
// service_instances, with the checks its /readyz runs — the Kafka of the
// relays and workers, the ZooKeeper of the prefetchers — all answering.
func checkInstancesReport(t *testing.T, p *platform, want map[string][]string) {
	t.Helper()
	ctx := ctxT(t, 40*time.Second)
	conn, err := pgx.Connect(ctx, p.ns.PostgresDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	needs := map[string]string{"relay": "kafka", "worker": "kafka", "prefetcher": "zookeeper", "api": "postgres"}
	var missing []string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		rows, err := instances.Read(ctx, conn, 100)
		if err != nil {
			t.Fatal(err)
		}
		missing = missing[:0]
		ready := map[string]bool{}
		apis := 0
		for _, r := range rows {
			ok := r.Ready && !r.Stopped
			checked := false
			for _, c := range r.Checks {
				checked = checked || (c.Name == needs[r.Service] && c.OK)
			}
			ready[r.Service+"/"+r.Name] = ok && checked
			if r.Service == "api" && ok && checked {
				apis++
			}
		}
		for service, names := range want {
			for _, n := range names {
				if !ready[service+"/"+n] {
					missing = append(missing, service+"/"+n)
				}
			}
		}
		if apis == 0 {
			missing = append(missing, "api")
		}
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("service_instances: not reported ready with its checks: %v (rows %+v)", missing, rows)
		}
	}
}

// metric reads one unlabelled gauge or counter from a service's /metrics.
func metric(t *testing.T, pr *proc, name string) (float64, bool) {
	t.Helper()
	m, err := pr.Metrics(ctxT(t, 5*time.Second))
	if err != nil {
		return 0, false
	}
	return m.Value(name)
}
