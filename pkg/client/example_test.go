package client_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialhq/sundial/pkg/client"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// Register a job from a deploy pipeline: the idempotency key makes a
// re-run of the pipeline return the job the first run created, and an api
// restarting under the call is ridden out by the client's retries.
func Example() {
	addr, stop := exampleAPI() // an api on loopback; yours is e.g. "sundial-api:9090"
	defer stop()

	c, err := client.New(addr, "dev-token", client.WithInsecure(), client.WithCallTimeout(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx := context.Background()
	job, err := c.CreateJob(ctx, &sundialv1.Job{
		Name:     "nightly-report",
		Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "0 9 * * MON-FRI"}, Timezone: "Europe/Paris"},
		Target:   &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "https://reports.example/run"}}},
	}, "deploy-42")
	if err != nil {
		for _, v := range client.FieldViolations(err) {
			log.Printf("%s: %s", v.Field, v.Description)
		}
		log.Fatal(err)
	}
	fmt.Println("created", job.GetName(), job.GetId())

	// Change one field; the others stay as they are.
	job.Name = "nightly-report-eu"
	job, err = c.UpdateJob(ctx, job, "name")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("renamed to", job.GetName())
	// Output:
	// created nightly-report 0193a1d2-7b4e-7000-8000-000000000001
	// renamed to nightly-report-eu
}

// Pause every job labelled team=billing for a maintenance window, however
// many there are: count first, then pause; the client calls the api until
// every match has been gone through.
func ExampleClient_BulkJobs() {
	addr, stop := exampleAPI()
	defer stop()
	c, err := client.New(addr, "dev-token", client.WithInsecure())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx := context.Background()
	billing := client.ListFilter{Labels: map[string]string{"team": "billing"}}
	count, err := c.BulkJobs(ctx, sundialv1.BulkAction_BULK_ACTION_PAUSE, billing, true)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("would pause", count.Matched, "jobs")
	done, err := c.BulkJobs(ctx, sundialv1.BulkAction_BULK_ACTION_PAUSE, billing, false)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("paused", done.Changed, "of", done.Matched)
	// Output:
	// would pause 2500 jobs
	// paused 2480 of 2500
}

// exampleJobs stands in for the api in the examples: its first answer to
// a create is Unavailable, as from a replica that is restarting.
type exampleJobs struct {
	sundialv1.UnimplementedJobServiceServer
	restarting bool
}

func (e *exampleJobs) CreateJob(_ context.Context, req *sundialv1.CreateJobRequest) (*sundialv1.CreateJobResponse, error) {
	if !e.restarting {
		e.restarting = true
		return nil, status.Error(codes.Unavailable, "restarting")
	}
	job := req.GetJob()
	job.Id = "0193a1d2-7b4e-7000-8000-000000000001"
	return &sundialv1.CreateJobResponse{Job: job}, nil
}

func (e *exampleJobs) UpdateJob(_ context.Context, req *sundialv1.UpdateJobRequest) (*sundialv1.UpdateJobResponse, error) {
	return &sundialv1.UpdateJobResponse{Job: req.GetJob()}, nil
}

// BulkJobAction matches 2,500 jobs, 20 of them paused already, and goes
// through them 1,000 a call as the api does.
func (e *exampleJobs) BulkJobAction(_ context.Context, req *sundialv1.BulkJobActionRequest) (*sundialv1.BulkJobActionResponse, error) {
	if req.GetDryRun() {
		return &sundialv1.BulkJobActionResponse{Matched: 2500}, nil
	}
	done, _ := strconv.Atoi(req.GetPageToken())
	n := min(2500-done, int(req.GetLimit()))
	resp := &sundialv1.BulkJobActionResponse{Matched: int64(n), Changed: int64(n)}
	if done == 0 {
		resp.Changed -= 20
	}
	if done+n < 2500 {
		resp.NextPageToken = strconv.Itoa(done + n)
	}
	return resp, nil
}

func exampleAPI() (string, func()) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer()
	sundialv1.RegisterJobServiceServer(srv, &exampleJobs{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	return ln.Addr().String(), func() { srv.Stop(); <-done }
}
