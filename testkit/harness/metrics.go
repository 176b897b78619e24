package harness

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metrics is one scrape of a process's /metrics, by metric name.
type Metrics map[string]*dto.MetricFamily

// Metrics scrapes the process's /metrics.
func (pr *Process) Metrics(ctx context.Context) (Metrics, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+pr.Admin+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	// The benchmarks scrape every second, far more often than Prometheus
	// does; uncompressed, the scrape costs the measured process no gzip.
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("harness: scrape %s: %w", pr.Name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("harness: scrape %s: %s", pr.Name, resp.Status)
	}
	return ParseMetrics(resp.Body)
}

// ParseMetrics reads the Prometheus text format.
func ParseMetrics(r io.Reader) (Metrics, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	m, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("harness: parse metrics: %w", err)
	}
	return Metrics(m), nil
}

// matches reports whether the series has every label pair of want
// (name, value, name, value, ...).
func matches(m *dto.Metric, want []string) bool {
	for i := 0; i+1 < len(want); i += 2 {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == want[i] && l.GetValue() == want[i+1] {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// Value is the sum of the counter, gauge or untyped series of name that
// carry the label pairs (name, value, ...); ok is false when none does.
func (m Metrics) Value(name string, labels ...string) (v float64, ok bool) {
	fam := m[name]
	if fam == nil {
		return 0, false
	}
	for _, s := range fam.GetMetric() {
		if !matches(s, labels) {
			continue
		}
		if sv, isValue := value(s); isValue {
			v += sv
			ok = true
		}
	}
	return v, ok
}

// value is a counter's, gauge's or untyped series' value; ok is false for
// any other kind.
func value(s *dto.Metric) (v float64, ok bool) {
	switch {
	case s.Counter != nil:
		return s.GetCounter().GetValue(), true
	case s.Gauge != nil:
		return s.GetGauge().GetValue(), true
	case s.Untyped != nil:
		return s.GetUntyped().GetValue(), true
	}
	return 0, false
}

// ByLabel sums the counter, gauge or untyped series of name by the value
// of label (series without it sum under "").
func (m Metrics) ByLabel(name, label string) map[string]float64 {
	out := map[string]float64{}
	fam := m[name]
	if fam == nil {
		return out
	}
	for _, s := range fam.GetMetric() {
		key := ""
		for _, l := range s.GetLabel() {
			if l.GetName() == label {
				key = l.GetValue()
			}
		}
		if v, ok := value(s); ok {
			out[key] += v
		}
	}
	return out
}

// Histogram is a cumulative histogram: Counts[i] observations were at most
// Bounds[i] (the last bound is +Inf).
type Histogram struct {
	Count  uint64
	Sum    float64
	Bounds []float64
	Counts []uint64
}

// Histogram merges the histogram series of name that carry the label pairs.
func (m Metrics) Histogram(name string, labels ...string) (Histogram, bool) {
	var h Histogram
	fam := m[name]
	if fam == nil {
		return h, false
	}
	byBound := map[float64]uint64{}
	ok := false
	for _, s := range fam.GetMetric() {
		if s.Histogram == nil || !matches(s, labels) {
			continue
		}
		ok = true
		hs := s.GetHistogram()
		h.Count += hs.GetSampleCount()
		h.Sum += hs.GetSampleSum()
		for _, b := range hs.GetBucket() {
			byBound[b.GetUpperBound()] += b.GetCumulativeCount()
		}
		byBound[math.Inf(1)] += hs.GetSampleCount()
	}
	for b := range byBound {
		h.Bounds = append(h.Bounds, b)
	}
	sort.Float64s(h.Bounds)
	for _, b := range h.Bounds {
		h.Counts = append(h.Counts, byBound[b])
	}
	return h, ok
}

// Sub is the histogram of the observations made after prev was taken (prev
// is an earlier scrape of the same series).
func (h Histogram) Sub(prev Histogram) Histogram {
	out := Histogram{Count: h.Count - prev.Count, Sum: h.Sum - prev.Sum, Bounds: h.Bounds}
	before := map[float64]uint64{}
	for i, b := range prev.Bounds {
		before[b] = prev.Counts[i]
	}
	for i, b := range h.Bounds {
		out.Counts = append(out.Counts, h.Counts[i]-before[b])
	}
	return out
}

// Mean is the average observation (0 without observations).
func (h Histogram) Mean() float64 {
	if h.Count == 0 {
		return 0
	}
	return h.Sum / float64(h.Count)
}

// Quantile estimates quantile q by linear interpolation inside the bucket
// it falls in, as Prometheus's histogram_quantile does; an observation
// above the last finite bound reports that bound.
func (h Histogram) Quantile(q float64) float64 {
	if h.Count == 0 || len(h.Bounds) == 0 {
		return 0
	}
	rank := q * float64(h.Count)
	lower, below := 0.0, uint64(0)
	for i, b := range h.Bounds {
		if float64(h.Counts[i]) >= rank {
			if math.IsInf(b, 1) {
				return lower
			}
			in := h.Counts[i] - below
			if in == 0 {
				return b
			}
			return lower + (b-lower)*(rank-float64(below))/float64(in)
		}
		lower, below = b, h.Counts[i]
	}
	return lower
}

// Seconds is a float number of seconds as a Duration.
func Seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// Add is the histogram of both h's and o's observations (the same series
// scraped from two processes). Either may be the zero Histogram; with
// different bounds, h is returned unchanged.
func (h Histogram) Add(o Histogram) Histogram {
	switch {
	case len(h.Bounds) == 0:
		return o
	case len(o.Bounds) == 0:
		return h
	case len(h.Bounds) != len(o.Bounds):
		return h
	}
	out := Histogram{Count: h.Count + o.Count, Sum: h.Sum + o.Sum, Bounds: h.Bounds}
	for i := range h.Counts {
		out.Counts = append(out.Counts, h.Counts[i]+o.Counts[i])
	}
	return out
}
