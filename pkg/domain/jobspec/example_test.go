package jobspec_test

import (
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sundialhq/sundial/pkg/domain/jobspec"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

func ExampleValidate() {
	job := &sundialv1.Job{
		Schedule:  &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: "0 0 32 * *"}},
		Target:    &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: "/hook"}}},
		MaxJitter: durationpb.New(2 * time.Minute),
	}
	var verr *jobspec.Error
	if errors.As(jobspec.Validate(job), &verr) {
		for _, v := range verr.Violations {
			fmt.Printf("%s: %s\n", v.Field, v.Description)
		}
	}
	// Output:
	// schedule.cron: day-of-month: 32 is out of range 1-31
	// target.http.url: must be an absolute http or https URL
	// max_jitter: must be between 0 and 60s, got 2m0s
}

func ExampleSchedule() {
	job := &sundialv1.Job{Schedule: &sundialv1.Schedule{
		Spec:     &sundialv1.Schedule_Cron{Cron: "0 9 * * MON-FRI"},
		Timezone: "Europe/Paris",
	}}
	s, err := jobspec.Schedule(job, time.Time{})
	if err != nil {
		panic(err)
	}
	fmt.Println(s.Next(time.Date(2026, 3, 27, 12, 0, 0, 0, time.UTC)).UTC())
	// Output: 2026-03-30 07:00:00 +0000 UTC
}

func ExampleExpandSecrets() {
	// What a worker does with a stored header value just before the request.
	secrets := map[string]string{"billing_token": "s3cr3t"}
	v, err := jobspec.ExpandSecrets("Bearer {{secret:billing_token}}", func(name string) (string, bool) {
		s, ok := secrets[name]
		return s, ok
	})
	fmt.Println(v, err)
	// Output: Bearer s3cr3t <nil>
}

func ExampleCheckURL() {
	for _, u := range []string{
		"http://127.0.0.1:18500/x?q=a b",
		"http://127.0.0.1:18500/x?q=a%20b",
		"reports.example/run",
		"https://reports.example/run#today",
	} {
		fmt.Printf("%s: %v\n", u, jobspec.CheckURL(u))
	}
	// Output:
	// http://127.0.0.1:18500/x?q=a b: contains a space at character 29: percent-encode it as %20
	// http://127.0.0.1:18500/x?q=a%20b: <nil>
	// reports.example/run: must be an absolute http or https URL: it has no scheme (start it with https:// or http://)
	// https://reports.example/run#today: has a fragment (from '#' at character 28), which is never sent to the target: leave it out, or percent-encode a '#' of the path or query as %23
}
