package client

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// flakyJobs is a JobService that answers Unavailable to the first
// `failures` calls of each method and records what it was sent.
type flakyJobs struct {
	sundialv1.UnimplementedJobServiceServer
	failures int

	mu       sync.Mutex
	calls    map[string]int
	keys     []string
	tokens   []string
	deadline []bool
}

func (f *flakyJobs) fail(ctx context.Context, method string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	md, _ := metadata.FromIncomingContext(ctx)
	f.tokens = append(f.tokens, md.Get("authorization")...)
	_, ok := ctx.Deadline()
	f.deadline = append(f.deadline, ok)
	f.calls[method]++
	if f.calls[method] <= f.failures {
		return status.Error(codes.Unavailable, "the job store is unavailable; retry later")
	}
	return nil
}

func (f *flakyJobs) CreateJob(ctx context.Context, req *sundialv1.CreateJobRequest) (*sundialv1.CreateJobResponse, error) {
	f.mu.Lock()
	f.keys = append(f.keys, req.GetIdempotencyKey())
	f.mu.Unlock()
	if err := f.fail(ctx, "create"); err != nil {
		return nil, err
	}
	if req.GetJob().GetName() == "bad" {
		st, _ := status.New(codes.InvalidArgument, "schedule.cron: day-of-month: 32 is out of range 1-31").WithDetails(&errdetails.BadRequest{
			FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "schedule.cron", Description: "day-of-month: 32 is out of range 1-31"}},
		})
		return nil, st.Err()
	}
	return &sundialv1.CreateJobResponse{Job: &sundialv1.Job{Id: "job-1", Name: req.GetJob().GetName()}}, nil
}

func (f *flakyJobs) TriggerJob(ctx context.Context, req *sundialv1.TriggerJobRequest) (*sundialv1.TriggerJobResponse, error) {
	if err := f.fail(ctx, "trigger"); err != nil {
		return nil, err
	}
	return &sundialv1.TriggerJobResponse{ExecutionId: "exec-1"}, nil
}

func (f *flakyJobs) GetJob(ctx context.Context, req *sundialv1.GetJobRequest) (*sundialv1.GetJobResponse, error) {
	_ = f.fail(ctx, "get")
	// Always unavailable: the api never comes back.
	return nil, status.Error(codes.Unavailable, "down")
}

func (f *flakyJobs) ListJobs(ctx context.Context, req *sundialv1.ListJobsRequest) (*sundialv1.ListJobsResponse, error) {
	if err := f.fail(ctx, "list"); err != nil {
		return nil, err
	}
	if req.GetPageToken() == "" {
		return &sundialv1.ListJobsResponse{Jobs: []*sundialv1.Job{{Id: "a"}, {Id: "b"}}, NextPageToken: "p2"}, nil
	}
	return &sundialv1.ListJobsResponse{Jobs: []*sundialv1.Job{{Id: "c"}}}, nil
}

// serve runs jobs on a loopback gRPC server for the test.
func serve(t *testing.T, jobs sundialv1.JobServiceServer) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	sundialv1.RegisterJobServiceServer(srv, jobs)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() { srv.Stop(); <-done })
	return ln.Addr().String()
}

func newClient(t *testing.T, addr string, opts ...Option) *Client {
	t.Helper()
	c, err := New(addr, "tok-acme", append([]Option{WithInsecure(), WithRetry(time.Millisecond, 5*time.Millisecond, 5*time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestCreateRetriesUnavailableWithOneKey(t *testing.T) {
	fake := &flakyJobs{failures: 2, calls: map[string]int{}}
	c := newClient(t, serve(t, fake))
	job, err := c.CreateJob(context.Background(), &sundialv1.Job{Name: "nightly"}, "")
	if err != nil || job.GetId() != "job-1" {
		t.Fatalf("CreateJob = %v, %v", job, err)
	}
	// Three attempts, one idempotency key the client made, the token and
	// a deadline on each.
	if len(fake.keys) != 3 || fake.keys[0] == "" || fake.keys[0] != fake.keys[1] || fake.keys[1] != fake.keys[2] {
		t.Fatalf("keys sent: %q", fake.keys)
	}
	for i := range fake.tokens {
		if fake.tokens[i] != "Bearer tok-acme" || !fake.deadline[i] {
			t.Fatalf("call %d: token %q, deadline %v", i, fake.tokens[i], fake.deadline[i])
		}
	}
	// The caller's key is used as given; another create gets another key.
	if _, err := c.CreateJob(context.Background(), &sundialv1.Job{Name: "x"}, "deploy-42"); err != nil || fake.keys[3] != "deploy-42" {
		t.Fatalf("caller's key: %q, %v", fake.keys, err)
	}
}

func TestTriggerIsNotRetried(t *testing.T) {
	fake := &flakyJobs{failures: 1, calls: map[string]int{}}
	c := newClient(t, serve(t, fake))
	if _, err := c.TriggerJob(context.Background(), "job-1"); status.Code(err) != codes.Unavailable || fake.calls["trigger"] != 1 {
		t.Fatalf("trigger: %v after %d calls", err, fake.calls["trigger"])
	}
}

func TestFieldViolationsAreNotRetried(t *testing.T) {
	fake := &flakyJobs{calls: map[string]int{}}
	c := newClient(t, serve(t, fake))
	_, err := c.CreateJob(context.Background(), &sundialv1.Job{Name: "bad"}, "k")
	vs := FieldViolations(err)
	if len(vs) != 1 || vs[0].Field != "schedule.cron" || fake.calls["create"] != 1 {
		t.Fatalf("violations %v of %v after %d calls", vs, err, fake.calls["create"])
	}
	if FieldViolations(errors.New("other")) != nil {
		t.Fatal("a plain error has no field violations")
	}
}

// A call against an api that stays down ends at the call timeout, saying
// what the api last answered.
func TestCallTimeoutBoundsRetries(t *testing.T) {
	fake := &flakyJobs{calls: map[string]int{}}
	c := newClient(t, serve(t, fake), WithCallTimeout(200*time.Millisecond), WithRetry(10*time.Millisecond, 20*time.Millisecond, 0))
	start := time.Now()
	_, err := c.GetJob(context.Background(), "job-1")
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "last error: rpc error: code = Unavailable desc = down") {
		t.Fatalf("GetJob = %v after %d calls", err, fake.calls["get"])
	}
	if el := time.Since(start); el > 2*time.Second || fake.calls["get"] < 2 {
		t.Fatalf("took %s, %d calls", el, fake.calls["get"])
	}
}

func TestJobsFollowsPages(t *testing.T) {
	fake := &flakyJobs{failures: 1, calls: map[string]int{}}
	c := newClient(t, serve(t, fake))
	var ids []string
	for j, err := range c.Jobs(context.Background(), ListFilter{}) {
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.GetId())
	}
	if len(ids) != 3 || ids[2] != "c" {
		t.Fatalf("ids %v", ids)
	}
}

func TestNewRefusesWithoutTransportChoice(t *testing.T) {
	if _, err := New("127.0.0.1:9090", "tok"); err == nil {
		t.Fatal("New without WithTLS or WithInsecure")
	}
	if _, err := New("127.0.0.1:9090", "", WithInsecure()); err == nil {
		t.Fatal("New without a token")
	}
}
