package harness

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// A process tree's CPU keeps the time of a child that has exited: a shell
// runs a busy subshell, waits for it, and sleeps on. Counting only the
// live processes, the subshell's time is gone; ReadUsage with tree keeps
// it (the shell's cutime), so the server's sum never falls.
func TestReadUsageTreeKeepsExitedChildren(t *testing.T) {
	done := filepath.Join(t.TempDir(), "done")
	cmd := exec.Command("sh", "-c", `( i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done ); : > "$1"; exec sleep 30`, "sh", done)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(done); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the busy subshell did not finish")
		}
		time.Sleep(20 * time.Millisecond)
	}
	pid := cmd.Process.Pid
	u, err := ReadUsage(pid, true, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	live, _, _, err := procCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range descendants(pid) {
		if cc, _, _, err := procCPU(c); err == nil {
			live += cc
		}
	}
	if u.CPU < 100*time.Millisecond || u.CPU < live+100*time.Millisecond {
		t.Fatalf("tree CPU %s, live processes' own %s: the exited subshell's time is missing", u.CPU, live)
	}
	own, err := ReadUsage(pid, false, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if own.CPU >= 100*time.Millisecond {
		t.Fatalf("without tree, CPU %s counts the children", own.CPU)
	}
}
