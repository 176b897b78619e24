package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// With a Prometheus, the overview's hour charts come from it, which
// scrapes the workers: sundial_worker_firings_total and
// sundial_worker_fire_lateness_seconds carry a tenant label, so every
// query names the session's tenant and a tenant sees its own firings only.
// Without one, the same charts are drawn from the workers' per-minute
// rollup in Postgres (numbers.go), which also gives the hour's and day's
// numbers either way; the ledger, partitioned by job, answers neither.

// series is one line of a range query: its labels and a value per step
// (NaN where Prometheus had none).
type series struct {
	Labels map[string]string
	Values []float64
}

// queryRange asks Prometheus for query over [start, end] at step, and
// returns one series per result, its values aligned on the steps.
func (c *Console) queryRange(ctx context.Context, query string, start, end time.Time, step time.Duration) ([]series, error) {
	q := url.Values{"query": {query}, "start": {strconv.FormatInt(start.Unix(), 10)}, "end": {strconv.FormatInt(end.Unix(), 10)},
		"step": {strconv.Itoa(int(step.Seconds()))}}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(c.cfg.PrometheusURL, "/")+"/api/v1/query_range?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.prom.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Values [][2]any          `json:"values"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 8<<20)).Decode(&body); err != nil {
		return nil, fmt.Errorf("prometheus answered %s: %w", resp.Status, err)
	}
	if body.Status != "success" {
		return nil, errors.New("prometheus: " + body.Error)
	}
	n := int(end.Sub(start)/step) + 1
	out := make([]series, 0, len(body.Data.Result))
	for _, r := range body.Data.Result {
		s := series{Labels: r.Metric, Values: make([]float64, n)}
		for i := range s.Values {
			s.Values[i] = math.NaN()
		}
		for _, v := range r.Values {
			ts, _ := v[0].(float64)
			text, _ := v[1].(string)
			f, err := strconv.ParseFloat(text, 64)
			i := int(math.Round((ts - float64(start.Unix())) / step.Seconds()))
			if err == nil && i >= 0 && i < n {
				s.Values[i] = f
			}
		}
		out = append(out, s)
	}
	return out, nil
}

// promString quotes s as a PromQL string literal (Go's escapes are
// PromQL's).
func promString(s string) string { return strconv.Quote(s) }

// lineChart is a chart drawn as SVG on the server, in a 600×120 box:
// nothing fetched, no script. Each line is an SVG path; a step without a
// value is a gap.
type lineChart struct {
	ID, Label, Unit string
	Max             string
	// Empty: no line has a value in the window.
	Empty      bool
	Start, End string
	Lines      []chartLine
	// Steps label the minutes of the table that holds the values for
	// those who do not see the chart; Per names a step ("minute").
	Steps []string
	Per   string
}

type chartLine struct {
	Name, Color, Path string
	Values            []string
	Total             string
	// PerSecond is a count line's newest minute as firings per second
	// (perSecond), the unit an on-call engineer thinks in.
	PerSecond string
	NoData    bool
	last      float64
}

var chartColors = map[string]string{"succeeded": "#1d7a3a", "failed": "#b3261e", "retry": "#8a5a00", "dead": "#6b1b9a", "p50": "#0b5cad", "p99": "#b3261e"}
var spareColors = []string{"#0b5cad", "#5b6470", "#c26a00", "#00838f", "#ad1457"}

// drawChart lays out the series (named by name) over the steps from start.
func drawChart(id, label, unit string, ss []series, name func(series) string, format func(float64) string, start time.Time, step time.Duration) *lineChart {
	if len(ss) == 0 {
		return nil
	}
	slices.SortFunc(ss, func(a, b series) int { return strings.Compare(name(a), name(b)) })
	maxV := 0.0
	for _, s := range ss {
		for _, v := range s.Values {
			if !math.IsNaN(v) && v > maxV {
				maxV = v
			}
		}
	}
	if maxV == 0 {
		maxV = 1
	}
	n := len(ss[0].Values)
	ch := &lineChart{ID: id, Label: label, Unit: unit, Max: format(maxV), Per: "minute", Start: start.UTC().Format("15:04Z"),
		End: start.Add(time.Duration(n-1) * step).UTC().Format("15:04Z")}
	for i := range n {
		ch.Steps = append(ch.Steps, start.Add(time.Duration(i)*step).UTC().Format("15:04"))
	}
	spare := 0
	for _, s := range ss {
		l := chartLine{Name: name(s), Color: chartColors[name(s)]}
		if l.Color == "" {
			l.Color = spareColors[spare%len(spareColors)]
			spare++
		}
		var path strings.Builder
		pen := false
		sum := 0.0
		for i, v := range s.Values {
			if math.IsNaN(v) {
				pen = false
				l.last = v
				l.Values = append(l.Values, "–")
				continue
			}
			sum += v
			l.last = v
			l.Values = append(l.Values, format(v))
			x := 0.0
			if n > 1 {
				x = float64(i) * 600 / float64(n-1)
			}
			y := 120 - v*120/maxV
			if pen {
				fmt.Fprintf(&path, " L%.1f,%.1f", x, y)
			} else {
				// l0,0: a lone point is a dot (round caps), not nothing.
				fmt.Fprintf(&path, " M%.1f,%.1f l0,0", x, y)
				pen = true
			}
		}
		l.Path = strings.TrimSpace(path.String())
		l.Total = format(sum)
		l.NoData = l.Path == ""
		ch.Lines = append(ch.Lines, l)
	}
	ch.Empty = !slices.ContainsFunc(ch.Lines, func(l chartLine) bool { return !l.NoData })
	return ch
}

// perSecond labels each line of a chart of counts per minute with its
// newest minute's rate per second: firings per minute is what the chart
// draws (whole firings, steady to read), firings per second what one
// compares with capacity (docs/capacity.md).
func perSecond(ch *lineChart) {
	for i, l := range ch.Lines {
		if !math.IsNaN(l.last) && !l.NoData {
			ch.Lines[i].PerSecond = strconv.FormatFloat(l.last/60, 'f', 2, 64)
		}
	}
}

// firingCharts are the overview's charts of the session tenant's last
// hour: firings per minute by outcome, and lateness at the target (p50,
// p99). An error says why they are missing; the page shows the rest.
func (c *Console) firingCharts(ctx context.Context, tenant string) ([]*lineChart, error) {
	const step = time.Minute
	// The last point is now: increase over [1m] there covers the minute
	// just gone, so a firing a few seconds old is already on the chart.
	end := c.cfg.Clock.Now().Truncate(time.Second)
	start := end.Add(-time.Hour)
	t := promString(tenant)
	firings, err := c.queryRange(ctx, `sum by (outcome) (increase(sundial_worker_firings_total{tenant=`+t+`}[1m]))`, start, end, step)
	if err != nil {
		return nil, err
	}
	var late []series
	for _, q := range []string{"0.5", "0.99"} {
		ss, err := c.queryRange(ctx, `histogram_quantile(`+q+`, sum by (le) (rate(sundial_worker_fire_lateness_seconds_bucket{tenant=`+t+`,stage="target"}[5m])))`, start, end, step)
		if err != nil {
			return nil, err
		}
		for _, s := range ss {
			s.Labels = map[string]string{"q": map[string]string{"0.5": "p50", "0.99": "p99"}[q]}
			late = append(late, s)
		}
	}
	count := func(v float64) string { return strconv.FormatFloat(math.Round(v), 'f', -1, 64) }
	dur := func(v float64) string {
		d := time.Duration(v * float64(time.Second))
		if d >= time.Second {
			return d.Round(10 * time.Millisecond).String()
		}
		return d.Round(100 * time.Microsecond).String()
	}
	var out []*lineChart
	if ch := drawChart("firings-chart", "Firings per minute by outcome, last hour", "firings", firings,
		func(s series) string { return s.Labels["outcome"] }, count, start, step); ch != nil {
		perSecond(ch)
		out = append(out, ch)
	}
	if ch := drawChart("lateness-chart", "Lateness at the target, p50 and p99 over 5 minutes, last hour", "", late,
		func(s series) string { return s.Labels["q"] }, dur, start, step); ch != nil {
		for i := range ch.Lines {
			ch.Lines[i].Total = "" // a sum of percentiles means nothing
		}
		out = append(out, ch)
	}
	return out, nil
}

// sample is one series of an instant query.
type sample struct {
	Labels map[string]string
	Value  float64
}

// queryInstant asks Prometheus for query now.
func (c *Console) queryInstant(ctx context.Context, query string) ([]sample, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(c.cfg.PrometheusURL, "/")+"/api/v1/query?"+url.Values{"query": {query}}.Encode(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.prom.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 8<<20)).Decode(&body); err != nil {
		return nil, fmt.Errorf("prometheus answered %s: %w", resp.Status, err)
	}
	if body.Status != "success" {
		return nil, errors.New("prometheus: " + body.Error)
	}
	out := make([]sample, 0, len(body.Data.Result))
	for _, r := range body.Data.Result {
		text, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(text, 64)
		if err != nil {
			continue
		}
		out = append(out, sample{Labels: r.Metric, Value: v})
	}
	slices.SortFunc(out, func(a, b sample) int {
		return strings.Compare(a.Labels["job"]+"/"+a.Labels["instance"], b.Labels["job"]+"/"+b.Labels["instance"])
	})
	return out, nil
}

// platformView is what an operator's overview adds: the whole platform's
// last hour and its components now.
type platformView struct {
	Charts     []*lineChart
	Components []sample
	Leaders    []sample
}

// platform reads the operator's panel: firings of every tenant, consumer
// lag per priority topic, the outbox's due rows; which scrape targets are
// up and which prefetchers lead.
func (c *Console) platform(ctx context.Context) (*platformView, error) {
	const step = time.Minute
	end := c.cfg.Clock.Now().Truncate(time.Second)
	start := end.Add(-time.Hour)
	v := &platformView{}
	count := func(x float64) string { return strconv.FormatFloat(math.Round(x), 'f', -1, 64) }
	for _, p := range []struct {
		id, label, query string
		name             func(series) string
	}{
		{"platform-firings-chart", "Firings per minute by outcome, every tenant", `sum by (outcome) (increase(sundial_worker_firings_total[1m]))`,
			func(s series) string { return s.Labels["outcome"] }},
		{"platform-lag-chart", "Consumer lag by priority topic (records not yet fetched)", `sum by (topic) (sundial_worker_consumer_lag_records)`,
			func(s series) string { t := s.Labels["topic"]; return t[strings.LastIndexByte(t, '.')+1:] }},
		{"platform-outbox-chart", "Outbox rows due and not yet published", `max(sundial_relay_outbox_due_rows)`,
			func(series) string { return "due" }},
	} {
		ss, err := c.queryRange(ctx, p.query, start, end, step)
		if err != nil {
			return nil, err
		}
		if ch := drawChart(p.id, p.label, "", ss, p.name, count, start, step); ch != nil {
			if p.id != "platform-firings-chart" {
				for i := range ch.Lines {
					ch.Lines[i].Total = "" // a sum of gauge readings means nothing
				}
			} else {
				perSecond(ch)
			}
			v.Charts = append(v.Charts, ch)
		}
	}
	var err error
	if v.Components, err = c.queryInstant(ctx, `up`); err != nil {
		return nil, err
	}
	if v.Leaders, err = c.queryInstant(ctx, `sundial_prefetcher_leader == 1`); err != nil {
		return nil, err
	}
	return v, nil
}

// deadLetterWindow is how many of the day's dead letters the overview
// reads: its counts and chart say "at least" beyond it.
const deadLetterWindow = 1000

// deadLetterCounts are the overview's dead-letter tiles and chart.
type deadLetterCounts struct {
	hour, day string
	chart     *lineChart
}

// deadLettersPerHour counts the day's dead letters (newest first, as the
// api lists them) by clock hour, the last 24 with the current one so far,
// and draws them. capped: more than the list holds died in the day, so
// the hours older than its oldest are unknown (gaps on the chart) and the
// counts are lower bounds ("1000+"). It comes from the api, not from
// Prometheus, so every tenant has this chart.
func deadLettersPerHour(dls []*sundialv1.DeadLetter, capped bool, now time.Time) deadLetterCounts {
	now = now.UTC()
	start := now.Truncate(time.Hour).Add(-23 * time.Hour)
	counts := make([]float64, 24)
	hour := 0
	oldest := now
	for _, d := range dls {
		t := d.GetDeadTime().AsTime()
		if t.Before(oldest) {
			oldest = t
		}
		if !t.Before(now.Add(-time.Hour)) {
			hour++
		}
		if i := int(t.Sub(start) / time.Hour); i >= 0 && i < len(counts) {
			counts[i]++
		}
	}
	out := deadLetterCounts{hour: strconv.Itoa(hour), day: strconv.Itoa(len(dls))}
	label := "Dead letters per hour, last 24 hours (UTC clock hours; the last one so far)"
	if capped {
		out.day += "+"
		if !oldest.Before(now.Add(-time.Hour)) {
			out.hour += "+"
		}
		// The hour of the oldest listed is partial, the earlier ones unread.
		for i := range counts {
			if start.Add(time.Duration(i+1) * time.Hour).Before(oldest.Add(time.Hour)) {
				counts[i] = math.NaN()
			}
		}
		label += fmt.Sprintf("; more than %d died in the day, so only the hours of the newest %d are drawn", len(dls), len(dls))
	}
	count := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	out.chart = drawChart("dead-letters-chart", label, "dead letters", []series{{Labels: map[string]string{}, Values: counts}},
		func(series) string { return "dead letters" }, count, start, time.Hour)
	out.chart.Per = "hour"
	return out
}
