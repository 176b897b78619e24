package bench

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sundialhq/sundial/testkit/harness"
)

// machineKey is the usageSnap entry for the whole machine: every CPU's
// busy time from /proc/stat, whoever spent it (the processes measured, the
// other components, anything else running).
const machineKey = MachineKey

// MachineKey names the whole machine in a UsageSnap and in Cores.
const MachineKey = "machine"

// BenchKey names the benchmark's own process (its sink and load) among the
// measured ones; the platform is every other process.
const BenchKey = "bench"

// ReadMachineUsage is the busy CPU time of the whole machine since boot,
// summed over its CPUs, from /proc/stat. Usage.Cores between two readings
// is how many cores were busy on average.
func ReadMachineUsage(now time.Time) (harness.Usage, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return harness.Usage{At: now}, err
	}
	busy, err := ParseProcStat(string(b))
	return harness.Usage{At: now, CPU: busy}, err
}

// ParseProcStat reads the busy time of the machine off /proc/stat's first
// line ("cpu  user nice system idle iowait irq softirq steal guest
// guest_nice", in USER_HZ ticks): user, nice, system, irq, softirq and
// steal. Idle and iowait are idle; guest time is already counted in user.
func ParseProcStat(stat string) (time.Duration, error) {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, errors.New("bench: /proc/stat does not start with the all-CPU line")
	}
	var busy uint64
	for _, i := range []int{1, 2, 3, 6, 7, 8} { // user nice system irq softirq steal
		if i >= len(f) {
			continue // steal is missing on very old kernels
		}
		v, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("bench: /proc/stat field %d: %w", i, err)
		}
		busy += v
	}
	const userHZ = 100 // USER_HZ on every Linux architecture Go supports
	return time.Duration(busy) * time.Second / userHZ, nil
}

// MsPerFiring is the CPU a firing cost, in milliseconds, when cores were
// busy on average while rate firings per second went through.
func MsPerFiring(cores, rate float64) float64 {
	if rate <= 0 {
		return 0
	}
	return cores / rate * 1000
}

// CPUPerFiring renders what each process spent per firing between two
// snapshots while rate firings per second went through: the whole machine
// first, then the platform (every process but the benchmark's own sink
// and load, "bench") and then every process that spent at least 0.005
// ms, most first, each to the microsecond, e.g. "1.55 ms (platform 1.400:
// cassandra 0.650, worker-1 0.480, bench 0.150)". Each process is rounded
// on its own, so the platform figure is the one to compare with a target.
func CPUPerFiring(a, b UsageSnap, rate float64) string {
	return CPUPerFiringOf(Cores(a, b), rate)
}

// CPUPerFiringOf is CPUPerFiring from the cores each process used
// (machineKey: the whole machine).
func CPUPerFiringOf(cores map[string]float64, rate float64) string {
	return cpuPerFiring(cores, rate, true)
}

// CPUPerFiringInProcess is CPUPerFiringOf for a system that runs inside
// the benchmark's process (River's and asynq's clients, the floor): no
// platform figure, since "bench" is part of that system.
func CPUPerFiringInProcess(cores map[string]float64, rate float64) string {
	return cpuPerFiring(cores, rate, false)
}

func cpuPerFiring(cores map[string]float64, rate float64, withPlatform bool) string {
	if rate <= 0 {
		return "–"
	}
	type part struct {
		name string
		ms   float64
	}
	var parts []part
	platform := 0.0
	for n, c := range cores {
		if n == machineKey {
			continue
		}
		if n != BenchKey {
			platform += MsPerFiring(c, rate)
		}
		if ms := MsPerFiring(c, rate); ms >= 0.005 {
			parts = append(parts, part{n, ms})
		}
	}
	sort.Slice(parts, func(i, j int) bool {
		if parts[i].ms != parts[j].ms {
			return parts[i].ms > parts[j].ms
		}
		return parts[i].name < parts[j].name
	})
	var procs []string
	for _, p := range parts {
		procs = append(procs, fmt.Sprintf("%s %.3f", p.name, p.ms))
	}
	head := "machine ?"
	if c, ok := cores[machineKey]; ok {
		head = fmt.Sprintf("%.2f ms", MsPerFiring(c, rate))
	}
	if len(procs) == 0 {
		return head
	}
	if !withPlatform {
		return head + " (" + strings.Join(procs, ", ") + ")"
	}
	return head + fmt.Sprintf(" (platform %.3f: ", platform) + strings.Join(procs, ", ") + ")"
}

// Cores is the cores every process of two snapshots used between them,
// by name ("machine" for the whole machine).
func Cores(a, b UsageSnap) map[string]float64 {
	out := map[string]float64{}
	for n := range b {
		if c, ok := cpuOf(a, b, n); ok {
			out[n] = c
		}
	}
	return out
}
