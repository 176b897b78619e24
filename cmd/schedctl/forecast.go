package main

// schedctl forecast: the firings the tenant's schedules make due in the
// time to come, its busiest minutes and its herds (ForecastService). Its
// row is in commands.go.

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

type forecastOpts struct {
	window        time.Duration
	priority      string
	herdThreshold int
	herds         int
}

func (o *forecastOpts) register(fs *flag.FlagSet) {
	fs.DurationVar(&o.window, "window", 24*time.Hour, "how far ahead: whole minutes, at most 168h (e.g. 1h, 24h, 168h)")
	fs.StringVar(&o.priority, "priority", "", "only jobs of this priority: CRITICAL, HIGH, MEDIUM or LOW")
	fs.IntVar(&o.herdThreshold, "herd-threshold", 0, "firings due at one instant that make a herd (default 100)")
	fs.IntVar(&o.herds, "herds", 0, "herds to list, largest first (default 20, at most 100)")
}

// forecastPriorities are --priority's words.
func forecastPriorities() []string {
	return enumWords(sundialv1.Priority_value, "PRIORITY_", strings.ToUpper)
}

func runForecast(ctx context.Context, r *remote, o *forecastOpts, args []string) error {
	if len(args) != 0 {
		return usagef("unexpected arguments %q", args)
	}
	req := &sundialv1.GetForecastRequest{Window: durationpb.New(o.window), HerdThreshold: int32(o.herdThreshold), MaxHerds: int32(o.herds)}
	if o.priority != "" {
		p, ok := sundialv1.Priority_value["PRIORITY_"+strings.ToUpper(o.priority)]
		if !ok || p == 0 {
			return usagef("--priority: %q is not one of %s", o.priority, strings.Join(forecastPriorities(), ", "))
		}
		req.Priority = sundialv1.Priority(p)
	}
	cctx, cancel := r.call(ctx)
	defer cancel()
	f, err := r.fcast.GetForecast(cctx, req)
	if err != nil {
		return err
	}
	if r.output == "json" {
		return r.printJSON(f)
	}
	printForecast(r.io.Stdout, f)
	return nil
}

// printForecast writes the forecast for people: the totals, the busiest
// minutes with their busiest seconds, the herds with their schedules and
// suggestions, and the breakdowns.
func printForecast(w io.Writer, f *sundialv1.GetForecastResponse) {
	from := f.GetFrom().AsTime().UTC()
	fmt.Fprintf(w, "forecast from %s for %s: %s firings due from %s active jobs (%s distinct schedules)\n",
		from.Format(time.RFC3339), f.GetWindow().AsDuration(), count(f.GetFirings()), count(f.GetJobs()), count(f.GetSchedules()))
	if p := f.GetPartial(); p != "" {
		fmt.Fprintf(w, "PARTIAL: %s\n", p)
	}
	if n := f.GetFailedJobs(); n > 0 {
		fmt.Fprintf(w, "%s jobs not counted: their schedule did not build\n", count(n))
	}
	var peak int64
	for _, p := range f.GetPeaks() {
		peak = max(peak, p.GetFirings())
	}
	if len(f.GetPeaks()) > 0 {
		fmt.Fprintf(w, "\nbusiest minutes (firings due; the busiest seconds, due → expected once jitter spreads them):\n")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, p := range f.GetPeaks() {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", p.GetTime().AsTime().UTC().Format("2006-01-02 15:04"), count(p.GetFirings()), bar(p.GetFirings(), peak, 30), busiestSeconds(p, 3))
		}
		_ = tw.Flush()
	}
	if len(f.GetHerds()) == 0 {
		fmt.Fprintf(w, "\nno herds: no instant has enough firings due at once\n")
	}
	for _, h := range f.GetHerds() {
		fmt.Fprintf(w, "\nHERD: %s firings at %s, %s of them from jobs with no jitter (at most %s a second once jitter spreads them)\n",
			count(h.GetFirings()), h.GetTime().AsTime().UTC().Format("2006-01-02 15:04:05 MST"), count(h.GetNoJitter()), strconv.FormatFloat(h.GetExpectedPeak(), 'f', -1, 64))
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "  SCHEDULE\tZONE\tJOBS\tNO JITTER\tSUGGESTION\n")
		for _, s := range h.GetSchedules() {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", s.GetExpression(), s.GetTimezone(), count(s.GetJobs()), count(s.GetNoJitter()), suggestion(s))
		}
		if n := h.GetMoreSchedules(); n > 0 {
			fmt.Fprintf(tw, "  … and %d more schedules\n", n)
		}
		_ = tw.Flush()
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, s := range h.GetSchedules() {
			for _, j := range s.GetSample() {
				slot := j.GetSlot()
				if slot != "" {
					slot = "→ " + slot
				}
				fmt.Fprintf(tw, "    %s\t%s\t%s\tjitter %s\t%s\n", orDash(j.GetName()), j.GetId(), j.GetTenant(), j.GetMaxJitter().AsDuration(), slot)
			}
			if n := s.GetMoreJobs(); n > 0 {
				fmt.Fprintf(tw, "    … and %s more jobs on %s\n", count(n), s.GetExpression())
			}
		}
		_ = tw.Flush()
	}
	for _, part := range []struct {
		title  string
		series []*sundialv1.ForecastSeries
	}{{"by priority", f.GetByPriority()}, {"by tenant", f.GetByTenant()}} {
		if len(part.series) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s:\n", part.title)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "  NAME\tFIRINGS\tBUSIEST MINUTE\n")
		for _, s := range part.series {
			fmt.Fprintf(tw, "  %s\t%s\t%s at %s\n", strings.TrimPrefix(s.GetName(), "PRIORITY_"), count(s.GetTotal()), count(s.GetPeak()), s.GetPeakTime().AsTime().UTC().Format("2006-01-02 15:04"))
		}
		_ = tw.Flush()
	}
}

// suggestion is a herd schedule's suggested jitter and H form.
func suggestion(s *sundialv1.ForecastHerdSchedule) string {
	var out []string
	if j := s.GetSuggestedJitter(); j != nil {
		out = append(out, "max_jitter "+j.AsDuration().String())
	}
	if e := s.GetSuggestedExpression(); e != "" {
		out = append(out, "cron "+e)
	}
	if len(out) == 0 {
		return "-"
	}
	return strings.Join(out, " or ")
}

// busiestSeconds lists a minute's n busiest seconds.
func busiestSeconds(p *sundialv1.ForecastPeak, n int) string {
	due, exp := p.GetDue(), p.GetExpected()
	var out []string
	used := map[int]bool{}
	for range n {
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
		out = append(out, fmt.Sprintf(":%02d %s→%s", best, count(due[best]), strconv.FormatFloat(e, 'f', -1, 64)))
	}
	return strings.Join(out, "  ")
}

// bar is a row of blocks n/peak of width long.
func bar(n, peak int64, width int) string {
	if peak <= 0 {
		return ""
	}
	return strings.Repeat("█", max(int(n*int64(width)/peak), 1))
}

// count writes n with thousands separators: 14,200.
func count(n int64) string {
	s := strconv.FormatInt(n, 10)
	if n < 0 {
		return "-" + count(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
