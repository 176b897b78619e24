package console

// The platform panel's services and the components they reach, without
// Prometheus: every service instance writes its readiness checks' answers
// to service_instances every ~10 s (pkg/postgres/instances). The api holds
// no connection to the firing brokers or to ZooKeeper, so Kafka's health is
// what the relays and workers report of it, and ZooKeeper's what the
// prefetchers do.

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/sundialhq/sundial/pkg/postgres/instances"
)

// instancesLimit bounds the rows read: a platform of hundreds of
// processes is far past what one panel lists.
const instancesLimit = 500

// serviceInstance is one row of the services table.
type serviceInstance struct {
	Service, Name string
	// State is ready, not ready, stopped or not reporting (no report for
	// instances.Fresh: the instance died, hangs or cannot reach
	// Postgres).
	State    string
	OK       bool
	Checks   []instanceCheck
	Reported string // how long ago
	Up       string // since when
}

// instanceCheck is one check of an instance, as shown.
type instanceCheck struct {
	Name, Error, Took string
	OK                bool
}

// reachedComponent is one component as the reporting instances see it.
type reachedComponent struct {
	Name string
	// By names the services whose instances check it; Of is how many
	// reporting instances check it, Failing the ones whose check failed.
	By      string
	Of, OK  int
	Failing []string
}

// instancesView reads service_instances into the services table and the
// components the services reach, judged from the reports still fresh.
func (c *Console) instancesView(ctx context.Context) ([]serviceInstance, []reachedComponent, error) {
	rows, err := instances.Read(ctx, c.cfg.Pool, instancesLimit)
	if err != nil {
		return nil, nil, err
	}
	now := c.cfg.Clock.Now()
	type tally struct {
		by      map[string]bool
		of, ok  int
		failing []string
	}
	tallies := map[string]*tally{}
	out := make([]serviceInstance, 0, len(rows))
	for _, r := range rows {
		age := now.Sub(r.Seen)
		in := serviceInstance{Service: r.Service, Name: r.Name,
			Reported: age.Round(time.Second).String() + " ago",
			Up:       r.Started.UTC().Format("2006-01-02 15:04:05Z")}
		fresh := age <= instances.Fresh && !r.Stopped
		switch {
		case r.Stopped:
			in.State = "stopped"
		case !fresh:
			in.State = "not reporting"
		case r.Ready:
			in.State, in.OK = "ready", true
		default:
			in.State = "not ready"
		}
		for _, ch := range r.Checks {
			in.Checks = append(in.Checks, instanceCheck{Name: ch.Name, OK: ch.OK, Error: ch.Error, Took: fmt.Sprintf("%.1f ms", ch.Ms)})
			if !fresh {
				continue
			}
			t := tallies[ch.Name]
			if t == nil {
				t = &tally{by: map[string]bool{}}
				tallies[ch.Name] = t
			}
			t.by[r.Service] = true
			t.of++
			if ch.OK {
				t.ok++
			} else {
				t.failing = append(t.failing, r.Service+" "+r.Name+": "+ch.Error)
			}
		}
		out = append(out, in)
	}
	reached := make([]reachedComponent, 0, len(tallies))
	for name, t := range tallies {
		reached = append(reached, reachedComponent{Name: name, By: strings.Join(slices.Sorted(maps.Keys(t.by)), ", "), Of: t.of, OK: t.ok, Failing: t.failing})
	}
	slices.SortFunc(reached, func(a, b reachedComponent) int { return strings.Compare(a.Name, b.Name) })
	return out, reached, nil
}
