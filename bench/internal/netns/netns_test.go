package netns

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// newNamespace makes a namespace for one test and deletes it after. The
// tests need root; without it they say so and skip (the chaos matrix
// instead fails when a row needs a namespace it cannot make).
func newNamespace(t *testing.T) *Namespace {
	t.Helper()
	if err := Available(); err != nil {
		t.Skipf("no network namespaces here: %v", err)
	}
	ctx := t.Context()
	name := fmt.Sprintf("sundial-test-%d-%s", os.Getpid(), strings.ReplaceAll(strings.ToLower(t.Name()), "/", "-"))
	if len(name) > 60 {
		name = name[:60]
	}
	n, err := Create(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Delete(context.Background()); err != nil {
			t.Error(err)
		}
		if _, err := os.Stat(n.path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still there after Delete: %v", n.path, err)
		}
	})
	return n
}

// echoServer answers every line with the line; it listens on ln until the
// test ends.
func echoServer(t *testing.T, ln net.Listener) string {
	t.Helper()
	done := make(chan struct{})
	go func() { // owned by the test: ends when ln closes at cleanup
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { // ends when the client closes c
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String()
}

func hostEcho(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return echoServer(t, ln)
}

// roundTrip sends one line on c and reads it back.
func roundTrip(c net.Conn, line string) error {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return err
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if got != line+"\n" {
		return fmt.Errorf("echo: got %q, want %q", got, line)
	}
	return nil
}

func TestNamespaceHasOnlyItsLoopback(t *testing.T) {
	n := newNamespace(t)
	addr := hostEcho(t)
	// The host's service is not there from inside...
	if c, err := n.Dial(t.Context(), addr); err == nil {
		c.Close()
		t.Fatalf("dialled the host's %s from inside the namespace", addr)
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial from inside: %v, want connection refused", err)
	}
	// ...and a process run there sees a loopback only, up.
	argv := n.Command("ip", "-o", "link", "show")
	out, err := exec.CommandContext(t.Context(), argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v\n%s", argv, err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], ": lo:") || !strings.Contains(lines[0], "UP") {
		t.Fatalf("links inside the namespace:\n%s", out)
	}
}

func TestCreateReplacesAStaleNamespace(t *testing.T) {
	n := newNamespace(t)
	again, err := Create(t.Context(), n.Name)
	if err != nil {
		t.Fatalf("Create over a namespace left behind: %v", err)
	}
	if again.Name != n.Name {
		t.Fatalf("name %q, want %q", again.Name, n.Name)
	}
}

func TestIntoCutAndResume(t *testing.T) {
	n := newNamespace(t)
	addr := hostEcho(t)
	f := n.Into(addr)
	if err := f.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)

	c, err := n.Dial(t.Context(), addr)
	if err != nil {
		t.Fatalf("dial through the forwarder: %v", err)
	}
	defer c.Close()
	if err := roundTrip(c, "before"); err != nil {
		t.Fatal(err)
	}

	if severed := f.Cut(); severed != 1 {
		t.Fatalf("Cut closed %d connections, want 1", severed)
	}
	if err := roundTrip(c, "during"); err == nil {
		t.Fatal("a connection open before the cut still works")
	}
	if c2, err := n.Dial(t.Context(), addr); err == nil {
		c2.Close()
		t.Fatal("a new connection during the cut was accepted")
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial during the cut: %v, want connection refused", err)
	}
	// The host still reaches its service: only the namespace is cut off.
	h, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := roundTrip(h, "host"); err != nil {
		t.Fatal(err)
	}

	if err := f.Resume(); err != nil {
		t.Fatal(err)
	}
	c3, err := n.Dial(t.Context(), addr)
	if err != nil {
		t.Fatalf("dial after Resume: %v", err)
	}
	defer c3.Close()
	if err := roundTrip(c3, "after"); err != nil {
		t.Fatal(err)
	}
	if s := f.Stats(); s.Accepted != 2 || s.Severed != 1 || s.Cuts != 1 || s.Failed != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestIntoStallAndResume(t *testing.T) {
	n := newNamespace(t)
	addr := hostEcho(t)
	f := n.Into(addr)
	if err := f.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	c, err := n.Dial(t.Context(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	echo := func(line string, within time.Duration) (string, error) {
		_ = c.SetDeadline(time.Now().Add(within))
		if _, err := io.WriteString(c, line+"\n"); err != nil {
			return "", err
		}
		return r.ReadString('\n')
	}
	if got, err := echo("before", 5*time.Second); err != nil || got != "before\n" {
		t.Fatalf("before the stall: %q, %v", got, err)
	}

	if open := f.Stall(); open != 1 {
		t.Fatalf("Stall saw %d connections open, want 1", open)
	}
	// The connection stays open, and nothing comes back: the client
	// learns of the partition only from its own deadline.
	if got, err := echo("during", 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("during the stall: got %q, %v; want the client's deadline", got, err)
	}
	// A new connection is accepted, and hangs too.
	c2, err := n.Dial(t.Context(), addr)
	if err != nil {
		t.Fatalf("dial during the stall: %v, want it accepted", err)
	}
	defer c2.Close()
	_ = c2.SetDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := io.WriteString(c2, "new\n"); err != nil {
		t.Fatal(err)
	}
	if got, err := bufio.NewReader(c2).ReadString('\n'); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a connection made during the stall answered %q, %v", got, err)
	}

	if err := f.Resume(); err != nil {
		t.Fatal(err)
	}
	// What was sent during the stall passes first, in order, as TCP would
	// deliver it once the partition heals.
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "during\n" {
		t.Fatalf("held bytes after Resume: %q, %v", got, err)
	}
	if got, err := echo("after", 5*time.Second); err != nil || got != "after\n" {
		t.Fatalf("after the stall: %q, %v", got, err)
	}
	if s := f.Stats(); s.Stalls != 1 || s.Stalled != 1 || s.Severed != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestOutOfReachesAServerInside(t *testing.T) {
	n := newNamespace(t)
	ln, err := n.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := echoServer(t, ln)
	// The address is free on the host: the server is inside only.
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatalf("reached the namespace's %s from the host without a forwarder", addr)
	}
	f := n.OutOf(addr)
	if err := f.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := roundTrip(c, "admin"); err != nil {
		t.Fatal(err)
	}
}

// A forwarder whose far side is down accepts and closes, and counts it.
func TestIntoFarSideDown(t *testing.T) {
	n := newNamespace(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	f := n.Into(addr)
	if err := f.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	c, err := n.Dial(t.Context(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := roundTrip(c, "x"); err == nil {
		t.Fatal("a round trip to a service that is down succeeded")
	}
	if s := f.Stats(); s.Failed != 1 {
		t.Fatalf("stats %+v, want one failed dial", s)
	}
}

// Close with connections open ends them and its goroutines.
func TestCloseEndsEverything(t *testing.T) {
	n := newNamespace(t)
	addr := hostEcho(t)
	f := n.Into(addr)
	if err := f.Start(); err != nil {
		t.Fatal(err)
	}
	c, err := n.Dial(t.Context(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := roundTrip(c, "open"); err != nil {
		t.Fatal(err)
	}
	f.Close() // returns only once the accept loop and the pipe ended
	if err := roundTrip(c, "closed"); err == nil {
		t.Fatal("the connection outlived Close")
	}
	if err := f.Start(); err == nil {
		t.Fatal("Start after Close succeeded")
	}
}

// The harness starts the services with Pdeathsig, which the kernel sends
// when the thread that forked a child ends. Joining a namespace must not
// end threads: the first chaos run that cut a worker off lost another
// worker, SIGKILLed without a log line, when a thread that had forked it
// ended after a Listen in the namespace.
func TestChildrenOfThreadsSurviveNamespaceCalls(t *testing.T) {
	n := newNamespace(t)
	var children []*exec.Cmd
	for range 8 {
		cmd := exec.Command("sleep", "60")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		children = append(children, cmd)
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }() // ends when the child does (cleanup kills it)
		t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	}
	addr := hostEcho(t)
	for range 200 {
		ln, err := n.Listen("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ln.Close()
		if c, err := n.Dial(t.Context(), addr); err == nil {
			c.Close()
		}
	}
	for _, cmd := range children {
		// signal 0: is it still there (not yet reaped by the Wait above)?
		if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
			t.Fatalf("child %d was killed: %v", cmd.Process.Pid, err)
		}
	}
}
