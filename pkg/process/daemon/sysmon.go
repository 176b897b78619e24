package daemon

import (
	"runtime"
	"strings"
	"syscall"
)

// SysmonSetting is the GODEBUG setting --sysmon-tick starts a service
// with. The Go runtime's system monitor (sysmon: it takes processors back
// from long system calls and preempts long-running goroutines) normally
// sleeps until the next timer whenever every processor is idle. A service
// that fires a timer every millisecond or so — the worker holding firings
// until their instants, at 1,000 firings a second — then wakes the
// monitor's thread about twice per timer, and on a virtual machine each of
// those wakes is an expensive context switch: the worker's profile showed
// 16 % of its CPU in the monitor's sleeps. With schedtrace set, the
// runtime never takes that deep sleep; the monitor stays on its own tick,
// which backs off to 10 ms while there is nothing to retake. The period
// (2^31−1 ms, about 24.8 days) is there only to switch the deep sleep
// off: the scheduler's one-line summary it enables is printed to stderr
// once that long after the host booted, and then every 24.8 days — and
// when the process dies of a fatal error, beside the stack dump.
// docs/benchmarks.md has the measurement.
const SysmonSetting = "schedtrace=2147483647"

// keepSysmonTicking re-executes the running binary with SysmonSetting
// added to GODEBUG — the runtime reads schedtrace only when a process
// starts — unless GODEBUG already sets schedtrace (an operator's choice,
// or this process after its re-exec) or the platform has no
// /proc/self/exe. It returns only when it did not re-execute, with the
// reason (or the exec's error).
func keepSysmonTicking(argv, environ []string, exec func(argv0 string, argv, envv []string) error) (string, error) {
	if runtime.GOOS != "linux" {
		return "not on Linux", nil
	}
	godebug, at := "", -1
	for i, kv := range environ {
		if v, ok := strings.CutPrefix(kv, "GODEBUG="); ok {
			godebug, at = v, i
		}
	}
	for _, s := range strings.Split(godebug, ",") {
		if strings.HasPrefix(strings.TrimSpace(s), "schedtrace=") {
			return "GODEBUG sets schedtrace", nil
		}
	}
	env := append([]string(nil), environ...)
	setting := SysmonSetting
	if godebug != "" {
		setting = godebug + "," + SysmonSetting
	}
	if at >= 0 {
		env[at] = "GODEBUG=" + setting
	} else {
		env = append(env, "GODEBUG="+setting)
	}
	return "", exec("/proc/self/exe", argv, env)
}

// execSelf is syscall.Exec; a variable so tests can see what would run.
var execSelf = syscall.Exec
