package harness

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Usage is the CPU time and memory of a process at one instant, read from
// /proc.
type Usage struct {
	At      time.Time
	CPU     time.Duration // user + system, since the process started
	RSS     int64         // resident set, bytes
	PeakRSS int64         // highest resident set so far (VmHWM), bytes
}

// Cores is the CPU the process used between prev and u, in cores (1.0 =
// one core busy all the time).
func (u Usage) Cores(prev Usage) float64 {
	wall := u.At.Sub(prev.At)
	if wall <= 0 {
		return 0
	}
	return float64(u.CPU-prev.CPU) / float64(wall)
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on every
// Linux architecture Go supports.
const clockTicks = 100

// ReadUsage reads pid's usage. With tree, CPU also counts every live
// descendant (a Postgres server's backends, say) and every descendant that
// has exited and been waited for (its time is in its parent's cutime and
// cstime): Postgres's autovacuum workers and closed connections' backends
// exit between two reads, and without them the sum fell, so a window's
// CPU could come out negative. Memory is pid's own, since descendants
// sharing memory would be counted twice.
func ReadUsage(pid int, tree bool, now time.Time) (Usage, error) {
	u := Usage{At: now}
	cpu, reaped, _, err := procCPU(pid)
	if err != nil {
		return u, err
	}
	u.CPU = cpu
	if tree {
		u.CPU += reaped
		for _, c := range descendants(pid) {
			if cc, cr, _, err := procCPU(c); err == nil {
				u.CPU += cc + cr
			}
		}
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, err
	}
	u.RSS = statusKB(string(status), "VmRSS:") * 1024
	u.PeakRSS = statusKB(string(status), "VmHWM:") * 1024
	return u, nil
}

// procCPU is pid's user+system time, that of its children it has waited
// for (cutime+cstime: theirs and, recursively, what they had waited for),
// and its parent's pid.
func procCPU(pid int) (own, reaped time.Duration, ppid int, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, 0, err
	}
	// The command name (field 2) is in parentheses and may contain spaces
	// or parentheses: the fields proper start after the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, 0, errors.New("harness: malformed /proc/" + strconv.Itoa(pid) + "/stat")
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state): ppid is field 4, utime 14, stime 15,
	// cutime 16, cstime 17.
	if len(f) < 15 {
		return 0, 0, 0, errors.New("harness: short /proc/" + strconv.Itoa(pid) + "/stat")
	}
	ppid, _ = strconv.Atoi(f[1])
	var t [4]int64 // cutime and cstime are signed in proc(5)
	for k := range t {
		v, err := strconv.ParseInt(f[11+k], 10, 64)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("harness: /proc/%d/stat: %w", pid, err)
		}
		t[k] = max(v, 0)
	}
	tick := func(n int64) time.Duration { return time.Duration(n) * time.Second / clockTicks }
	return tick(t[0] + t[1]), tick(t[2] + t[3]), ppid, nil
}

// descendants lists every live process below pid.
func descendants(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if _, _, ppid, err := procCPU(p); err == nil {
			children[ppid] = append(children[ppid], p)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

func statusKB(status, key string) int64 {
	for line := range strings.SplitSeq(status, "\n") {
		if rest, ok := strings.CutPrefix(line, key); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb
		}
	}
	return 0
}

// Usage reads the process's usage (its own, not its children's).
func (pr *Process) Usage(now time.Time) (Usage, error) { return ReadUsage(pr.Pid(), false, now) }

// ComponentPid is the pid of a component (postgres, redis, zookeeper,
// kafka, cassandra) that deploy/local/infra.sh started with its files in
// infraDir (the repository's .infra unless SUNDIAL_INFRA_DIR says
// otherwise), or 0 when it is not running there.
func ComponentPid(infraDir, component string) int {
	f := filepath.Join(infraDir, component, "pid")
	if component == "postgres" {
		f = filepath.Join(infraDir, "postgres", "data", "postmaster.pid")
	}
	return PidFile(f)
}

// PidFile is the pid the first line of the pid file f names, or 0 when
// the file is missing or that process is not running.
func PidFile(f string) int {
	b, err := os.ReadFile(f)
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		return 0
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
		return 0
	}
	return pid
}
