package main

// schedctl export: jobs written out as a crontab or as Kubernetes CronJob
// manifests, the formats schedctl import reads. Only what the format can
// say is written; every job it cannot (an interval, a one-off, a
// recurrence rule, a seconds field, extra schedules, exclusions, a
// calendar) is left out and named on stderr with why.

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

type exportOpts struct {
	format, status, out string
	labels              kvFlag
}

func (o *exportOpts) register(fs *flag.FlagSet) {
	o.labels = kvFlag{}
	fs.StringVar(&o.format, "format", "crontab", "crontab or cronjob (Kubernetes CronJob YAML, one document per job)")
	fs.StringVar(&o.status, "status", "", "only jobs with this status: active or paused (default both)")
	fs.Var(o.labels, "label", "only jobs with this label key=value (repeatable; all must match)")
	fs.StringVar(&o.out, "out", "", "write to this file instead of stdout")
}

// runExport lists the tenant's jobs (every page) and writes them out.
func runExport(ctx context.Context, r *remote, o *exportOpts, args []string) error {
	if len(args) != 0 {
		return usagef("unexpected arguments %q", args)
	}
	if o.format != "crontab" && o.format != "cronjob" {
		return usagef("--format must be crontab or cronjob, got %q", o.format)
	}
	req := &sundialv1.ListJobsRequest{PageSize: 1000, Labels: o.labels}
	switch o.status {
	case "":
	case "active", "paused":
		req.Status = sundialv1.JobStatus(sundialv1.JobStatus_value["JOB_STATUS_"+strings.ToUpper(o.status)])
	default:
		return usagef("--status: want active or paused, got %q", o.status)
	}
	var jobs []*sundialv1.Job
	for {
		cctx, cancel := r.call(ctx)
		resp, err := r.client.ListJobs(cctx, req)
		cancel()
		if err != nil {
			return err
		}
		for _, j := range resp.GetJobs() {
			// Completed jobs have nothing left to fire.
			if s := j.GetStatus(); s == sundialv1.JobStatus_JOB_STATUS_ACTIVE || s == sundialv1.JobStatus_JOB_STATUS_PAUSED {
				jobs = append(jobs, j)
			}
		}
		if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" {
			break
		}
	}
	w := r.io.Stdout
	if o.out != "" {
		f, err := os.Create(o.out)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	var skipped []string
	var err error
	if o.format == "crontab" {
		skipped, err = writeCrontab(w, jobs)
	} else {
		skipped, err = writeCronJobs(w, jobs)
	}
	if err != nil {
		return err
	}
	for _, s := range skipped {
		fmt.Fprintf(r.io.Stderr, "skipped %s\n", s)
	}
	fmt.Fprintf(r.io.Stderr, "%d job(s) exported, %d skipped\n", len(jobs)-len(skipped), len(skipped))
	return nil
}

// exportable says why a job has no crontab or CronJob form, or "" when it
// has one: a single five-field cron expression (or @macro), nothing more.
func exportable(j *sundialv1.Job) string {
	s := j.GetSchedule()
	switch {
	case s.GetCron() == "":
		return "its schedule is not a cron expression"
	case !strings.HasPrefix(s.GetCron(), "@") && len(strings.Fields(s.GetCron())) != 5:
		return "its cron expression is not five fields (crontab has no seconds)"
	case strings.HasPrefix(s.GetCron(), "@every"):
		return "@every has no crontab form"
	case len(s.GetAdditionalSchedules()) > 0:
		return "it has additional schedules"
	case len(s.GetExclusions()) > 0:
		return "it has exclusions"
	case s.GetCalendar() != "":
		return "it follows a business calendar"
	case s.GetStartTime() != nil || s.GetEndTime() != nil:
		return "its schedule has start or end bounds"
	}
	return ""
}

// exportedRun is what an exported job runs: the command it was imported
// with (the payload schedctl import writes), or a curl of its HTTP target.
type exportedRun struct {
	Command string            `json:"command"`
	Env     map[string]string `json:"env"`
	Image   string            `json:"image"`
}

func runOf(j *sundialv1.Job) (exportedRun, string) {
	var run exportedRun
	if json.Unmarshal(j.GetPayload(), &run) == nil && run.Command != "" {
		return run, ""
	}
	h := j.GetTarget().GetHttp()
	if h == nil {
		return run, "its target is Kafka, which a command line cannot name"
	}
	method := h.GetMethod()
	if method == "" {
		method = "POST"
	}
	run.Command = "curl -fsS -X " + method + " " + shellQuote(h.GetUrl())
	run.Image = "curlimages/curl"
	return run, ""
}

// envValue quotes a crontab variable's value when spaces at its ends
// would otherwise be lost.
func envValue(v string) string {
	if v != strings.TrimSpace(v) || strings.ContainsAny(v, "\"'") {
		return `"` + v + `"`
	}
	return v
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// writeCrontab writes jobs as a crontab: grouped by time zone under
// CRON_TZ= lines, each job under a "# name:" comment (so importing the
// file back gives the same names), paused ones commented out.
func writeCrontab(w io.Writer, jobs []*sundialv1.Job) (skipped []string, err error) {
	type line struct {
		name, text string
		env        map[string]string
	}
	byZone := map[string][]line{}
	for _, j := range jobs {
		why := exportable(j)
		run, whyRun := runOf(j)
		if why == "" {
			why = whyRun
		}
		if why != "" {
			skipped = append(skipped, fmt.Sprintf("%s (%s): %s", j.GetName(), j.GetId(), why))
			continue
		}
		text := j.GetSchedule().GetCron() + " " + run.Command
		if j.GetStatus() == sundialv1.JobStatus_JOB_STATUS_PAUSED {
			text = "# paused: " + text
		}
		zone := j.GetSchedule().GetTimezone()
		if zone == "" {
			zone = "UTC"
		}
		byZone[zone] = append(byZone[zone], line{j.GetName(), text, run.Env})
	}
	zones := make([]string, 0, len(byZone))
	for z := range byZone {
		zones = append(zones, z)
	}
	sort.Strings(zones)
	var b strings.Builder
	b.WriteString("# Written by schedctl export.\n")
	env := map[string]string{}
	for _, z := range zones {
		fmt.Fprintf(&b, "\nCRON_TZ=%s\n", z)
		for _, l := range byZone[z] {
			// A variable applies to every line below it: set the ones
			// this job's differ in. One a job lacks but a job above set
			// cannot be unset; it is emptied.
			keys := make([]string, 0, len(l.env)+len(env))
			for k := range l.env {
				keys = append(keys, k)
			}
			for k := range env {
				if _, ok := l.env[k]; !ok {
					keys = append(keys, k)
				}
			}
			sort.Strings(keys)
			for _, k := range keys {
				if v, ok := env[k]; !ok || v != l.env[k] {
					fmt.Fprintf(&b, "%s=%s\n", k, envValue(l.env[k]))
					env[k] = l.env[k]
				}
			}
			fmt.Fprintf(&b, "# name: %s\n%s\n", l.name, l.text)
		}
	}
	_, err = io.WriteString(w, b.String())
	return skipped, err
}

// Kubernetes object names: lower-case letters, digits and '-', at most
// 52 characters for a CronJob (its Jobs add a suffix).
var dnsDrop = regexp.MustCompile(`[^a-z0-9-]+`)

func k8sName(s string) string {
	n := strings.Trim(dnsDrop.ReplaceAllString(strings.ToLower(s), "-"), "-")
	if len(n) > 52 {
		n = strings.TrimRight(n[:52], "-")
	}
	if n == "" {
		n = "job"
	}
	return n
}

var overlapToConcurrency = map[sundialv1.OverlapPolicy]string{
	sundialv1.OverlapPolicy_OVERLAP_POLICY_UNSPECIFIED:     "Allow",
	sundialv1.OverlapPolicy_OVERLAP_POLICY_ALLOW:           "Allow",
	sundialv1.OverlapPolicy_OVERLAP_POLICY_SKIP:            "Forbid",
	sundialv1.OverlapPolicy_OVERLAP_POLICY_TERMINATE_OTHER: "Replace",
}

type k8sCronJob struct {
	APIVersion string      `yaml:"apiVersion"`
	Kind       string      `yaml:"kind"`
	Metadata   k8sMetadata `yaml:"metadata"`
	Spec       k8sSpec     `yaml:"spec"`
}

type k8sMetadata struct {
	Name        string            `yaml:"name"`
	Namespace   string            `yaml:"namespace,omitempty"`
	Labels      map[string]string `yaml:"labels,omitempty"`
	Annotations map[string]string `yaml:"annotations,omitempty"`
}

type k8sSpec struct {
	Schedule                string  `yaml:"schedule"`
	TimeZone                string  `yaml:"timeZone,omitempty"`
	ConcurrencyPolicy       string  `yaml:"concurrencyPolicy"`
	StartingDeadlineSeconds *int64  `yaml:"startingDeadlineSeconds,omitempty"`
	Suspend                 bool    `yaml:"suspend,omitempty"`
	JobTemplate             k8sJobT `yaml:"jobTemplate"`
}

type k8sJobT struct {
	Spec struct {
		Template struct {
			Spec struct {
				RestartPolicy string         `yaml:"restartPolicy"`
				Containers    []k8sContainer `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type k8sContainer struct {
	Name    string   `yaml:"name"`
	Image   string   `yaml:"image"`
	Command []string `yaml:"command"`
	Env     []k8sEnv `yaml:"env,omitempty"`
}

type k8sEnv struct {
	Name  string `yaml:"name"`
	Value string `yaml:"value"`
}

// writeCronJobs writes one batch/v1 CronJob per job: the overlap policy
// as concurrencyPolicy (ALLOW, SKIP and TERMINATE_OTHER have one; the
// others are skipped), the misfire grace as startingDeadlineSeconds
// (unless misfires are skipped), paused as suspend. The command runs
// under /bin/sh -c in the image the job was imported with, or curl.
func writeCronJobs(w io.Writer, jobs []*sundialv1.Job) (skipped []string, err error) {
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	written := 0
	for _, j := range jobs {
		why := exportable(j)
		run, whyRun := runOf(j)
		policy, ok := overlapToConcurrency[j.GetOverlap()]
		switch {
		case why != "":
		case whyRun != "":
			why = whyRun
		case !ok:
			why = "its overlap policy " + strings.TrimPrefix(j.GetOverlap().String(), "OVERLAP_POLICY_") + " has no concurrencyPolicy"
		}
		if why != "" {
			skipped = append(skipped, fmt.Sprintf("%s (%s): %s", j.GetName(), j.GetId(), why))
			continue
		}
		ns, name, found := strings.Cut(j.GetName(), "/")
		if !found {
			ns, name = "", j.GetName()
		}
		labels := map[string]string{}
		for k, v := range j.GetLabels() {
			if k != "imported-from" {
				labels[k] = v
			}
		}
		cj := k8sCronJob{APIVersion: "batch/v1", Kind: "CronJob",
			Metadata: k8sMetadata{Name: k8sName(name), Namespace: ns, Labels: labels,
				Annotations: map[string]string{"sundial.dev/job-id": j.GetId(), "sundial.dev/job-name": j.GetName()}},
			Spec: k8sSpec{Schedule: j.GetSchedule().GetCron(), TimeZone: j.GetSchedule().GetTimezone(), ConcurrencyPolicy: policy,
				Suspend: j.GetStatus() == sundialv1.JobStatus_JOB_STATUS_PAUSED}}
		if len(cj.Metadata.Labels) == 0 {
			cj.Metadata.Labels = nil
		}
		if m := j.GetMisfire(); m.GetAction() != sundialv1.MisfireAction_MISFIRE_ACTION_SKIP && m.GetGrace() != nil {
			secs := int64(m.GetGrace().AsDuration().Seconds())
			cj.Spec.StartingDeadlineSeconds = &secs
		}
		image := run.Image
		if image == "" {
			image = "busybox"
		}
		// A CronJob's command and args were joined by spaces on import:
		// split them back. Anything else runs through a shell, as cron
		// runs it.
		c := k8sContainer{Name: k8sName(name), Image: image, Command: []string{"/bin/sh", "-c", run.Command}}
		if j.GetLabels()["imported-from"] == "cronjob" {
			c.Command = strings.Fields(run.Command)
		}
		keys := make([]string, 0, len(run.Env))
		for k := range run.Env {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			c.Env = append(c.Env, k8sEnv{Name: k, Value: run.Env[k]})
		}
		cj.Spec.JobTemplate.Spec.Template.Spec.RestartPolicy = "Never"
		cj.Spec.JobTemplate.Spec.Template.Spec.Containers = []k8sContainer{c}
		if err := enc.Encode(cj); err != nil {
			return skipped, err
		}
		written++
	}
	if written == 0 {
		return skipped, nil // an empty stream: yaml.v3 refuses to close one
	}
	return skipped, enc.Close()
}
