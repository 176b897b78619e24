package main

// The formats schedctl import reads: crontab files and Kubernetes CronJob
// manifests. Each becomes a list of CreateJob items, every one carrying
// where in its file it came from, so an error names file:line. Parsing is
// offline and complete before anything is sent: a file with one bad line
// registers nothing.

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"text/template"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"gopkg.in/yaml.v3"

	"github.com/sundialhq/sundial/pkg/domain/jobspec"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// importItem is one job an import would create, and where it came from.
type importItem struct {
	source string // file:line
	req    *sundialv1.CreateJobRequest
}

// importSource is what a target template sees of one imported line or
// manifest: {{.Name}}, {{.Command}}, {{urlquery .Command}}, ...
type importSource struct {
	// Name is the job's name (see cronName and the CronJob's metadata).
	Name string
	// Command is the crontab line's command, or the CronJob container's
	// command and args joined by spaces.
	Command string
	// Schedule and TimeZone as the job gets them.
	Schedule, TimeZone string
	// Env holds the crontab's variables set above the line, or the
	// container's env values.
	Env map[string]string
	// Namespace and Image are a CronJob's (empty for a crontab line).
	Namespace, Image string
	// File and Line are where the job was read.
	File string
	Line int
}

// importTarget turns an importSource into a job's target: an HTTP URL or
// a Kafka topic, each from a text/template.
type importTarget struct {
	url, topic *template.Template
	method     string
}

func newImportTarget(urlTmpl, topicTmpl, method string) (*importTarget, error) {
	switch {
	case urlTmpl == "" && topicTmpl == "":
		return nil, usagef("a target is required: --target-template URL or --kafka-topic-template TOPIC (e.g. --target-template 'http://runner:8080/run?cmd={{urlquery .Command}}')")
	case urlTmpl != "" && topicTmpl != "":
		return nil, usagef("--target-template and --kafka-topic-template are exclusive: a job has one target")
	}
	t := &importTarget{method: method}
	var err error
	if urlTmpl != "" {
		if t.url, err = template.New("target-template").Option("missingkey=error").Parse(urlTmpl); err != nil {
			return nil, usagef("--target-template: %v", err)
		}
	} else if t.topic, err = template.New("kafka-topic-template").Option("missingkey=error").Parse(topicTmpl); err != nil {
		return nil, usagef("--kafka-topic-template: %v", err)
	}
	return t, nil
}

func (t *importTarget) target(src importSource) (*sundialv1.Target, error) {
	var b strings.Builder
	if t.url != nil {
		if err := t.url.Execute(&b, src); err != nil {
			return nil, fmt.Errorf("--target-template: %v", err)
		}
		u := b.String()
		if p, err := url.Parse(u); err != nil || strings.ContainsAny(u, " \t") || p.Host == "" {
			return nil, fmt.Errorf("--target-template made %q, not a URL; escape the command with {{urlquery .Command}}", u)
		}
		return &sundialv1.Target{Kind: &sundialv1.Target_Http{Http: &sundialv1.HttpTarget{Url: u, Method: t.method}}}, nil
	}
	if err := t.topic.Execute(&b, src); err != nil {
		return nil, fmt.Errorf("--kafka-topic-template: %v", err)
	}
	return &sundialv1.Target{Kind: &sundialv1.Target_Kafka{Kafka: &sundialv1.KafkaTarget{Topic: b.String()}}}, nil
}

// importPayload is the body each firing of an imported job carries: what
// to run, so one runner endpoint can serve every imported job. It holds
// nothing of where the line was (its file or line number), so moving a
// line does not change the job's idempotency key.
func importPayload(src importSource) []byte {
	p := struct {
		Command string            `json:"command"`
		Env     map[string]string `json:"env,omitempty"`
		Image   string            `json:"image,omitempty"`
	}{src.Command, src.Env, src.Image}
	b, _ := json.Marshal(p) // strings and a map of strings always encode
	return b
}

// finishItem fills the fields every imported job shares, checks the job
// offline as the api will (jobspec.Validate), and keys it: the key is the
// job's name and a hash of its definition, so importing the same file again
// creates nothing, and a line changed since becomes a new job.
func finishItem(src importSource, job *sundialv1.Job, paused bool, labels map[string]string, t *importTarget) (importItem, error) {
	where := fmt.Sprintf("%s:%d", src.File, src.Line)
	target, err := t.target(src)
	if err != nil {
		return importItem{}, err
	}
	job.Name, job.Target, job.Payload = src.Name, target, importPayload(src)
	if job.Labels == nil {
		job.Labels = map[string]string{}
	}
	for k, v := range labels {
		job.Labels[k] = v
	}
	if err := jobspec.Validate(job); err != nil {
		return importItem{}, err
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(job)
	if err != nil {
		return importItem{}, err
	}
	sum := sha256.Sum256(append(b, strconv.FormatBool(paused)...))
	key := "import/" + src.Name + "/" + hex.EncodeToString(sum[:8])
	return importItem{source: where, req: &sundialv1.CreateJobRequest{Job: job, IdempotencyKey: key, Paused: paused}}, nil
}

// refusedMacros are crontab macros with no instant Sundial could fire at.
var refusedMacros = map[string]string{
	"@reboot": "@reboot runs when the machine boots, and Sundial has no machine to boot; give it a schedule or start it from the host's init system",
}

var (
	envLine     = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)$`)
	nameComment = regexp.MustCompile(`^#\s*(?:sundial:\s*)?name\s*[:=]\s*(\S.*?)\s*$`)
	slugDrop    = regexp.MustCompile(`[^a-z0-9]+`)
)

// cronName is an imported crontab line's job name when no "# name:"
// comment gives one: a readable slug of the command and a hash of what
// makes the line (schedule, zone, command), so the same line always gets
// the same name and two lines never share one.
func cronName(schedule, tz, command string) string {
	slug := strings.Trim(slugDrop.ReplaceAllString(strings.ToLower(command), "-"), "-")
	if len(slug) > 40 {
		slug = strings.TrimRight(slug[:40], "-")
	}
	sum := sha256.Sum256([]byte(schedule + "\x00" + tz + "\x00" + command))
	if slug == "" {
		slug = "cron"
	}
	return slug + "-" + hex.EncodeToString(sum[:4])
}

// parseCrontab reads a crontab (crontab(5) as cronie and Vixie cron write
// it, user crontabs: no user field): blank lines and # comments; VAR=value
// lines, CRON_TZ= setting the zone of the lines after it (TZ= too) and the
// others handed to the target template and the payload as Env; schedule
// lines of five fields or an @macro, then the
// command. A "# name: NAME" comment names the next line's job. @reboot is
// refused with why. Every error names file:line; all are reported.
func parseCrontab(file string, r io.Reader, t *importTarget, labels map[string]string) ([]importItem, []error) {
	var (
		items   []importItem
		errs    []error
		tz      string
		env     = map[string]string{}
		name    string
		names   = map[string]int{}
		scanner = bufio.NewScanner(r)
		n       = 0
	)
	scanner.Buffer(make([]byte, 64<<10), 1<<20)
	for scanner.Scan() {
		n++
		line := strings.TrimSpace(scanner.Text())
		where := fmt.Sprintf("%s:%d", file, n)
		switch {
		case line == "":
			continue
		case strings.HasPrefix(line, "#"):
			if m := nameComment.FindStringSubmatch(line); m != nil {
				name = m[1]
			}
			continue
		}
		if m := envLine.FindStringSubmatch(line); m != nil {
			val := unquoteEnv(m[2])
			switch m[1] {
			case "CRON_TZ", "TZ":
				if _, err := time.LoadLocation(val); err != nil || val == "" {
					errs = append(errs, fmt.Errorf("%s: %s=%q is not an IANA time zone", where, m[1], val))
					continue
				}
				tz = val
			default:
				env[m[1]] = val
			}
			continue
		}
		fields := strings.Fields(line)
		var schedule, command string
		switch {
		case strings.HasPrefix(fields[0], "@"):
			if why, refused := refusedMacros[fields[0]]; refused {
				errs = append(errs, fmt.Errorf("%s: %s", where, why))
				name = ""
				continue
			}
			if len(fields) < 2 {
				errs = append(errs, fmt.Errorf("%s: %s has no command after it", where, fields[0]))
				continue
			}
			schedule = fields[0]
			command = strings.TrimSpace(strings.TrimPrefix(line, fields[0]))
		default:
			const nf = 5 // crontab(5) has no seconds field
			if len(fields) <= nf {
				errs = append(errs, fmt.Errorf("%s: want %d schedule fields and a command, got %q", where, nf, line))
				name = ""
				continue
			}
			schedule = strings.Join(fields[:nf], " ")
			command = afterFields(line, nf)
		}
		src := importSource{Name: name, Command: command, Schedule: schedule, TimeZone: tz, Env: copyEnv(env), File: file, Line: n}
		if src.Name == "" {
			src.Name = cronName(schedule, tz, command)
		}
		name = ""
		if first, dup := names[src.Name]; dup {
			errs = append(errs, fmt.Errorf("%s: job name %q repeats line %d's; name one of them with a \"# name: NAME\" comment above it", where, src.Name, first))
			continue
		}
		names[src.Name] = n
		job := &sundialv1.Job{Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: schedule}, Timezone: tz},
			Labels: map[string]string{"imported-from": "crontab"}}
		it, err := finishItem(src, job, false, labels, t)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
			continue
		}
		items = append(items, it)
	}
	if err := scanner.Err(); err != nil {
		errs = append(errs, fmt.Errorf("%s:%d: %v", file, n+1, err))
	}
	return items, errs
}

// afterFields is line without its first n whitespace-separated fields.
func afterFields(line string, n int) string {
	rest := line
	for range n {
		rest = strings.TrimLeft(rest, " \t")
		if i := strings.IndexAny(rest, " \t"); i >= 0 {
			rest = rest[i:]
		} else {
			rest = ""
		}
	}
	return strings.TrimSpace(rest)
}

func unquoteEnv(v string) string {
	v = strings.TrimSpace(v)
	if len(v) >= 2 && (v[0] == '"' && v[len(v)-1] == '"' || v[0] == '\'' && v[len(v)-1] == '\'') {
		return v[1 : len(v)-1]
	}
	return v
}

func copyEnv(env map[string]string) map[string]string {
	if len(env) == 0 {
		return nil
	}
	out := make(map[string]string, len(env))
	for k, v := range env {
		out[k] = v
	}
	return out
}

// cronJobOverlap maps a CronJob's concurrencyPolicy to an overlap policy:
// Forbid skips a run while the last one runs, Replace cancels the running
// one for the new one.
var cronJobOverlap = map[string]sundialv1.OverlapPolicy{
	"":        sundialv1.OverlapPolicy_OVERLAP_POLICY_ALLOW,
	"Allow":   sundialv1.OverlapPolicy_OVERLAP_POLICY_ALLOW,
	"Forbid":  sundialv1.OverlapPolicy_OVERLAP_POLICY_SKIP,
	"Replace": sundialv1.OverlapPolicy_OVERLAP_POLICY_TERMINATE_OTHER,
}

// parseCronJobs reads Kubernetes manifests (one or many YAML documents)
// and turns every batch/v1 CronJob into a job: spec.schedule (a
// "CRON_TZ=zone " prefix too) and spec.timeZone, concurrencyPolicy as the
// overlap policy, startingDeadlineSeconds as the misfire grace (missed
// runs within it run once, as the CronJob controller does), suspend as
// created paused. The name is metadata.name ("namespace/name" with a
// namespace); metadata.labels become labels. Documents of other kinds are
// skipped and listed in skipped. Errors name file:line of the field at
// fault.
func parseCronJobs(file string, r io.Reader, t *importTarget, labels map[string]string) (items []importItem, skipped []string, errs []error) {
	dec := yaml.NewDecoder(r)
	names := map[string]int{}
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return items, skipped, errs
		}
		if err != nil {
			return items, skipped, append(errs, fmt.Errorf("%s: %v", file, err))
		}
		if len(doc.Content) == 0 {
			continue
		}
		root := doc.Content[0]
		at := func(n *yaml.Node) string {
			if n == nil {
				n = root
			}
			return fmt.Sprintf("%s:%d", file, n.Line)
		}
		if root.Kind != yaml.MappingNode {
			errs = append(errs, fmt.Errorf("%s: a manifest must be a mapping", at(root)))
			continue
		}
		kind, api := yamlScalar(yamlAt(root, "kind")), yamlScalar(yamlAt(root, "apiVersion"))
		if kind != "CronJob" {
			if kind != "" {
				skipped = append(skipped, fmt.Sprintf("%s: %s %s (not a CronJob)", at(root), kind, yamlScalar(yamlAt(root, "metadata", "name"))))
			}
			continue
		}
		if api != "batch/v1" && api != "batch/v1beta1" {
			errs = append(errs, fmt.Errorf("%s: apiVersion %q: want batch/v1", at(yamlAt(root, "apiVersion")), api))
			continue
		}
		it, err := cronJobItem(file, root, at, names, t, labels)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		items = append(items, it)
	}
}

func cronJobItem(file string, root *yaml.Node, at func(*yaml.Node) string, names map[string]int, t *importTarget, labels map[string]string) (importItem, error) {
	nameNode := yamlAt(root, "metadata", "name")
	name := yamlScalar(nameNode)
	if name == "" {
		return importItem{}, fmt.Errorf("%s: metadata.name is required", at(yamlAt(root, "metadata")))
	}
	ns := yamlScalar(yamlAt(root, "metadata", "namespace"))
	if ns != "" {
		name = ns + "/" + name
	}
	if first, dup := names[name]; dup {
		return importItem{}, fmt.Errorf("%s: CronJob %s repeats line %d's", at(nameNode), name, first)
	}
	names[name] = nameNode.Line
	schedNode := yamlAt(root, "spec", "schedule")
	schedule := strings.TrimSpace(yamlScalar(schedNode))
	if schedule == "" {
		return importItem{}, fmt.Errorf("%s: spec.schedule is required", at(yamlAt(root, "spec")))
	}
	tzNode := yamlAt(root, "spec", "timeZone")
	tz := yamlScalar(tzNode)
	for _, prefix := range []string{"CRON_TZ=", "TZ="} {
		if rest, ok := strings.CutPrefix(schedule, prefix); ok {
			zone, expr, _ := strings.Cut(rest, " ")
			if tz == "" {
				tz = zone
			}
			schedule, tzNode = strings.TrimSpace(expr), schedNode
		}
	}
	if strings.HasPrefix(schedule, "@") {
		if why, refused := refusedMacros[strings.Fields(schedule)[0]]; refused {
			return importItem{}, fmt.Errorf("%s: spec.schedule: %s", at(schedNode), why)
		}
	}
	job := &sundialv1.Job{
		Schedule: &sundialv1.Schedule{Spec: &sundialv1.Schedule_Cron{Cron: schedule}, Timezone: tz},
		Labels:   map[string]string{"imported-from": "cronjob"},
	}
	var meta map[string]string
	if n := yamlAt(root, "metadata", "labels"); n != nil {
		if err := n.Decode(&meta); err != nil {
			return importItem{}, fmt.Errorf("%s: metadata.labels: %v", at(n), err)
		}
		for k, v := range meta {
			job.Labels[k] = v
		}
	}
	polNode := yamlAt(root, "spec", "concurrencyPolicy")
	overlap, ok := cronJobOverlap[yamlScalar(polNode)]
	if !ok {
		return importItem{}, fmt.Errorf("%s: spec.concurrencyPolicy %q: want Allow, Forbid or Replace", at(polNode), yamlScalar(polNode))
	}
	job.Overlap = overlap
	deadlineNode := yamlAt(root, "spec", "startingDeadlineSeconds")
	if deadlineNode != nil {
		secs, err := strconv.ParseInt(yamlScalar(deadlineNode), 10, 64)
		if err != nil || secs < 0 {
			return importItem{}, fmt.Errorf("%s: spec.startingDeadlineSeconds %q: want a whole number of seconds, 0 or more", at(deadlineNode), yamlScalar(deadlineNode))
		}
		job.Misfire = &sundialv1.MisfirePolicy{Action: sundialv1.MisfireAction_MISFIRE_ACTION_RUN_ONCE, Grace: durationpb.New(time.Duration(secs) * time.Second)}
	}
	suspendNode := yamlAt(root, "spec", "suspend")
	paused := false
	if suspendNode != nil {
		if err := suspendNode.Decode(&paused); err != nil {
			return importItem{}, fmt.Errorf("%s: spec.suspend %q: want true or false", at(suspendNode), yamlScalar(suspendNode))
		}
	}
	src := importSource{Name: name, Schedule: schedule, TimeZone: tz, Namespace: ns, File: file, Line: root.Line}
	if c := yamlAt(root, "spec", "jobTemplate", "spec", "template", "spec", "containers"); c != nil && c.Kind == yaml.SequenceNode && len(c.Content) > 0 {
		var container struct {
			Image   string   `yaml:"image"`
			Command []string `yaml:"command"`
			Args    []string `yaml:"args"`
			Env     []struct {
				Name  string `yaml:"name"`
				Value string `yaml:"value"`
			} `yaml:"env"`
		}
		if err := c.Content[0].Decode(&container); err != nil {
			return importItem{}, fmt.Errorf("%s: the first container: %v", at(c.Content[0]), err)
		}
		src.Image = container.Image
		src.Command = strings.Join(append(container.Command, container.Args...), " ")
		for _, e := range container.Env {
			if src.Env == nil {
				src.Env = map[string]string{}
			}
			src.Env[e.Name] = e.Value
		}
	}
	it, err := finishItem(src, job, paused, labels, t)
	if err != nil {
		// Point at the field at fault when the api's rules name one.
		var jerr *jobspec.Error
		if errors.As(err, &jerr) && len(jerr.Violations) > 0 {
			line := root
			switch f := jerr.Violations[0].Field; {
			case strings.HasPrefix(f, "schedule.timezone") && tzNode != nil:
				line = tzNode
			case strings.HasPrefix(f, "schedule"):
				line = schedNode
			case strings.HasPrefix(f, "misfire") && deadlineNode != nil:
				line = deadlineNode
			case strings.HasPrefix(f, "name"):
				line = nameNode
			}
			return importItem{}, fmt.Errorf("%s: CronJob %s: %w", at(line), name, err)
		}
		return importItem{}, fmt.Errorf("%s: CronJob %s: %w", at(root), name, err)
	}
	return it, nil
}

// yamlAt follows a path of mapping keys from n; nil when a key is missing.
func yamlAt(n *yaml.Node, path ...string) *yaml.Node {
	for _, key := range path {
		if n == nil || n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				next = n.Content[i+1]
				break
			}
		}
		n = next
	}
	return n
}

func yamlScalar(n *yaml.Node) string {
	if n == nil || n.Kind != yaml.ScalarNode {
		return ""
	}
	return n.Value
}

// sniffFormat tells a CronJob manifest from a crontab by its content: a
// YAML document naming a kind.
func sniffFormat(b []byte) string {
	if bytes.Contains(b, []byte("kind:")) && bytes.Contains(b, []byte("apiVersion:")) {
		return "cronjob"
	}
	return "crontab"
}
