//go:build integration

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// schedctl forecast against the real api binary and database: the
// midnight herd of 100 jitter-less jobs and 5 jittered ones is printed as
// the issue words it, with the H suggestion; -o json carries the minutes;
// a bad --priority is a usage error naming the flag.
func TestIntegrationForecastCommand(t *testing.T) {
	addr, _, _ := startAPI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	gc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(auth.Bearer("cli-token")))
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	jobs := sundialv1.NewJobServiceClient(gc)
	for i := range 105 {
		j := &sundialv1.Job{Name: fmt.Sprint("nightly-", i),
			Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "0 0 * * *"}},
			Target:   &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "http://127.0.0.1:9/hook"}}}}
		if i >= 100 {
			j.MaxJitter = durationpb.New(20 * time.Second)
		}
		if _, err := jobs.CreateJob(ctx, &sundialv1.CreateJobRequest{Job: j}); err != nil {
			t.Fatal(err)
		}
	}
	midnight := time.Now().UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
	do := schedctlAt(t, addr)
	out, _ := do("forecast", "--window", "24h")
	for _, want := range []string{
		"firings due from 105 active jobs (1 distinct schedules)",
		fmt.Sprintf("HERD: 105 firings at %s, 100 of them from jobs with no jitter", midnight.Format("2006-01-02 15:04:05 MST")),
		"0 0 * * *  UTC   105   100        max_jitter 1m0s or cron H 0 * * *",
		"… and 85 more jobs on 0 0 * * *",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("forecast output lacks %q:\n%s", want, out)
		}
	}
	out, _ = do("forecast", "--window", "2h", "--priority", "high", "-o", "json")
	var f struct {
		Jobs    string   `json:"jobs"`
		Minutes []string `json:"minutes"`
	}
	if err := json.Unmarshal([]byte(out), &f); err != nil || f.Jobs != "" && f.Jobs != "0" || len(f.Minutes) != 120 {
		t.Fatalf("forecast --priority high -o json: %v, jobs %q, %d minutes\n%s", err, f.Jobs, len(f.Minutes), out)
	}
	code, _, stderr := run(t, addr, map[string]string{"SUNDIAL_TOKEN": "cli-token"}, "forecast", "--priority", "urgent")
	if code != 2 || !strings.Contains(stderr, "--priority: \"urgent\" is not one of CRITICAL, HIGH, MEDIUM, LOW") {
		t.Fatalf("--priority urgent: exit %d, %s", code, stderr)
	}
}
