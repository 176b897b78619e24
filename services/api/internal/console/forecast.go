package console

// The forecast page: the firings the tenant's schedules make due ahead,
// drawn as a bar chart on the server like the overview's charts (SVG, no
// script), with the busiest minutes, the herds and the jobs that make
// them (ForecastService, pkg/domain/forecast).

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// forecastWindows are the page's windows, each with the width of one bar:
// a bar is the busiest minute within it, so a one-minute herd stands out
// at every scale.
var forecastWindows = []struct {
	Value, Label string
	Window, Bar  time.Duration
}{
	{"1h", "next hour", time.Hour, time.Minute},
	{"24h", "next 24 hours", 24 * time.Hour, 10 * time.Minute},
	{"168h", "next 7 days", 7 * 24 * time.Hour, time.Hour},
}

// forecastBar is one bar of the chart, in the 600×120 box.
type forecastBar struct {
	X, Y, W, H string
	Herd       bool
	Title      string
}

// forecastBucket is one bar's row in the table beside the chart.
type forecastBucket struct {
	Start, Busiest, Total string
	Herd                  bool
}

func (c *Console) forecastPage(w http.ResponseWriter, r *http.Request, s *session) {
	q := r.URL.Query()
	win := forecastWindows[1]
	if v := q.Get("window"); v != "" {
		found := false
		for _, fw := range forecastWindows {
			if fw.Value == v {
				win, found = fw, true
			}
		}
		if !found {
			c.render(w, http.StatusBadRequest, "error", s, map[string]any{"Title": http.StatusText(http.StatusBadRequest),
				"Message": fmt.Sprintf("window: %q is not one of 1h, 24h, 168h", v)})
			return
		}
	}
	req := &sundialv1.GetForecastRequest{Window: durationpb.New(win.Window)}
	prio := q.Get("priority")
	if prio != "" {
		p, ok := sundialv1.Priority_value["PRIORITY_"+prio]
		if !ok || p == 0 {
			c.render(w, http.StatusBadRequest, "error", s, map[string]any{"Title": http.StatusText(http.StatusBadRequest),
				"Message": fmt.Sprintf("priority: %q is not one of CRITICAL, HIGH, MEDIUM, LOW", prio)})
			return
		}
		req.Priority = sundialv1.Priority(p)
	}
	f, err := sundialv1.NewForecastServiceClient(c.cfg.Conn).GetForecast(s.call(r.Context()), req)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	bars, buckets, maxV := forecastBars(f, win.Bar)
	herds := make([]map[string]any, 0, len(f.GetHerds()))
	for _, h := range f.GetHerds() {
		herds = append(herds, map[string]any{
			"At": h.GetTime().AsTime().UTC().Format("2006-01-02 15:04:05 UTC"), "Firings": thousands(h.GetFirings()),
			"NoJitter": thousands(h.GetNoJitter()), "ExpectedPeak": strconv.FormatFloat(h.GetExpectedPeak(), 'f', -1, 64),
			"Schedules": h.GetSchedules(), "MoreSchedules": h.GetMoreSchedules(),
		})
	}
	peaks := make([]map[string]any, 0, len(f.GetPeaks()))
	for _, p := range f.GetPeaks() {
		peaks = append(peaks, map[string]any{"At": p.GetTime().AsTime().UTC().Format("2006-01-02 15:04"), "Firings": thousands(p.GetFirings()), "Seconds": busiestSeconds(p)})
	}
	c.render(w, http.StatusOK, "forecast", s, map[string]any{
		"Windows": forecastWindows, "Window": win.Value, "WindowLabel": win.Label, "Priority": prio,
		"Priorities": []string{"CRITICAL", "HIGH", "MEDIUM", "LOW"},
		"From":       f.GetFrom().AsTime().UTC().Format("2006-01-02 15:04 UTC"),
		"Firings":    thousands(f.GetFirings()), "Jobs": thousands(f.GetJobs()), "Schedules": thousands(f.GetSchedules()),
		"Partial": f.GetPartial(), "Failed": f.GetFailedJobs(),
		"Bars": bars, "Buckets": buckets, "Max": thousands(maxV), "BarWidth": barLabel(win.Bar),
		"Start": f.GetFrom().AsTime().UTC().Format("Jan 2 15:04Z"), "End": f.GetFrom().AsTime().Add(win.Window).UTC().Format("Jan 2 15:04Z"),
		"Peaks": peaks, "Herds": herds, "ByPriority": seriesRows(f.GetByPriority()), "ByTenant": seriesRows(f.GetByTenant()),
	})
}

// seriesRows are a breakdown's rows as the page shows them.
func seriesRows(ss []*sundialv1.ForecastSeries) []map[string]string {
	out := make([]map[string]string, 0, len(ss))
	for _, s := range ss {
		out = append(out, map[string]string{"Name": strings.TrimPrefix(s.GetName(), "PRIORITY_"), "Total": thousands(s.GetTotal()),
			"Peak": thousands(s.GetPeak()), "At": s.GetPeakTime().AsTime().UTC().Format("2006-01-02 15:04")})
	}
	return out
}

// forecastBars groups the minutes into bars of width bar, each as tall as
// its busiest minute; a bar holding a herd is marked.
func forecastBars(f *sundialv1.GetForecastResponse, bar time.Duration) ([]forecastBar, []forecastBucket, int64) {
	per := int(bar / time.Minute)
	mins := f.GetMinutes()
	from := f.GetFrom().AsTime().UTC()
	n := (len(mins) + per - 1) / per
	busiest := make([]int64, n)
	totals := make([]int64, n)
	var maxV int64
	for i, v := range mins {
		b := i / per
		busiest[b] = max(busiest[b], v)
		totals[b] += v
		maxV = max(maxV, v)
	}
	herd := make([]bool, n)
	for _, h := range f.GetHerds() {
		if i := int(h.GetTime().AsTime().Sub(from) / bar); i >= 0 && i < n {
			herd[i] = true
		}
	}
	scale := float64(max(maxV, 1))
	w := 600 / float64(max(n, 1))
	bars := make([]forecastBar, 0, n)
	buckets := make([]forecastBucket, 0, n)
	for i := range n {
		start := from.Add(time.Duration(i) * bar)
		h := float64(busiest[i]) * 120 / scale
		if busiest[i] > 0 {
			h = max(h, 1) // a bar with firings is never invisible
		}
		title := fmt.Sprintf("%s: busiest minute %s firings, %s in all", start.Format("Jan 2 15:04Z"), thousands(busiest[i]), thousands(totals[i]))
		if herd[i] {
			title += " (a herd)"
		}
		bars = append(bars, forecastBar{X: ftoa(float64(i) * w), Y: ftoa(120 - h), W: ftoa(max(w-0.5, 0.5)), H: ftoa(h), Herd: herd[i], Title: title})
		buckets = append(buckets, forecastBucket{Start: start.Format("Jan 2 15:04"), Busiest: thousands(busiest[i]), Total: thousands(totals[i]), Herd: herd[i]})
	}
	return bars, buckets, maxV
}

// busiestSeconds lists a minute's three busiest seconds: due, and expected
// once jitter has spread them.
func busiestSeconds(p *sundialv1.ForecastPeak) string {
	due, exp := p.GetDue(), p.GetExpected()
	used := map[int]bool{}
	var out []string
	for range 3 {
		best := -1
		for s, v := range due {
			if !used[s] && v > 0 && (best < 0 || v > due[best]) {
				best = s
			}
		}
		if best < 0 {
			break
		}
		used[best] = true
		e := 0.0
		if best < len(exp) {
			e = exp[best]
		}
		out = append(out, fmt.Sprintf(":%02d %s due, %s with jitter", best, thousands(due[best]), strconv.FormatFloat(e, 'f', -1, 64)))
	}
	return strings.Join(out, "; ")
}

func barLabel(d time.Duration) string {
	switch d {
	case time.Minute:
		return "minute"
	case time.Hour:
		return "hour"
	}
	return strconv.Itoa(int(d/time.Minute)) + " minutes"
}

func ftoa(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }
