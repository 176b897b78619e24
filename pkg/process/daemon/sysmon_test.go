package daemon

import (
	"errors"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
)

func TestKeepSysmonTickingSetsGODEBUG(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("re-executes through /proc/self/exe, Linux only")
	}
	for _, c := range []struct {
		name    string
		environ []string
		want    string // GODEBUG after; "" means no re-exec
	}{
		{"no GODEBUG", []string{"A=1"}, SysmonSetting},
		{"other settings kept", []string{"GODEBUG=gctrace=1", "A=1"}, "gctrace=1," + SysmonSetting},
		{"operator's schedtrace wins", []string{"GODEBUG=gctrace=1,schedtrace=1000"}, ""},
		{"after the re-exec", []string{"GODEBUG=" + SysmonSetting}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			var gotArgv0 string
			var gotArgv, gotEnv []string
			why, err := keepSysmonTicking([]string{"svc", "--x"}, c.environ, func(argv0 string, argv, envv []string) error {
				gotArgv0, gotArgv, gotEnv = argv0, argv, envv
				return errors.New("exec refused")
			})
			if c.want == "" {
				if err != nil || why == "" || gotArgv0 != "" {
					t.Fatalf("re-executed (%q, %v, %q), want no re-exec", gotArgv0, err, why)
				}
				return
			}
			if err == nil || err.Error() != "exec refused" {
				t.Fatalf("err = %v, want the exec's error", err)
			}
			if gotArgv0 != "/proc/self/exe" || !slices.Equal(gotArgv, []string{"svc", "--x"}) {
				t.Fatalf("exec(%q, %q), want /proc/self/exe with the same arguments", gotArgv0, gotArgv)
			}
			var godebug []string
			for _, kv := range gotEnv {
				if v, ok := strings.CutPrefix(kv, "GODEBUG="); ok {
					godebug = append(godebug, v)
				}
			}
			if len(godebug) != 1 || godebug[0] != c.want || !slices.Contains(gotEnv, "A=1") && slices.Contains(c.environ, "A=1") {
				t.Fatalf("environment %q, want one GODEBUG=%s and the rest kept", gotEnv, c.want)
			}
		})
	}
}

// The real thing: a process re-executes itself once and runs on with the
// setting; the child of this test prints the GODEBUG it ended up with.
func TestKeepSysmonTickingReexecutesOnce(t *testing.T) {
	if os.Getenv("SUNDIAL_DAEMON_SYSMON_CHILD") == "1" {
		if why, err := keepSysmonTicking(os.Args, os.Environ(), syscall.Exec); err != nil {
			os.Stdout.WriteString("exec failed: " + err.Error() + "\n")
			os.Exit(3)
		} else {
			os.Stdout.WriteString("GODEBUG=" + os.Getenv("GODEBUG") + " (" + why + ")\n")
			os.Exit(0)
		}
	}
	if runtime.GOOS != "linux" {
		t.Skip("re-executes through /proc/self/exe, Linux only")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestKeepSysmonTickingReexecutesOnce$")
	cmd.Env = append(os.Environ(), "SUNDIAL_DAEMON_SYSMON_CHILD=1", "GODEBUG=gctrace=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	want := "GODEBUG=gctrace=0," + SysmonSetting + " (GODEBUG sets schedtrace)\n"
	if string(out) != want {
		t.Fatalf("child printed %q, want %q", out, want)
	}
}
