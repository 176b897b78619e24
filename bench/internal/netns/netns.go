// Package netns puts one process in a network namespace of its own and
// cuts it off from one component at a time, without the components knowing.
//
// The local components listen on 127.0.0.1 only, so a process in another
// namespace cannot reach them over a veth pair without their listeners
// changing. Instead a namespace here has nothing but its loopback, and the
// process that made it forwards: a Forwarder listens on 127.0.0.1:<port>
// inside the namespace and dials the same address on the host for each
// connection (Into), or the reverse for a server inside the namespace that
// the host must reach, such as a service's admin port (OutOf). Cutting a
// forwarder closes its connections and its listener, so the process inside
// sees its component refuse connections, while every other process on the
// host still reaches it.
//
// A socket belongs to the namespace of the thread that created it, for its
// whole life. Namespace.Listen and Namespace.Dial create theirs on an OS
// thread locked to their goroutine, which joins the namespace with
// setns(2) and goes back to the host's before the thread is unlocked, so
// no other goroutine ever runs there; the accepts, reads and writes on
// those sockets then run on any thread.
//
// Making a namespace takes root (CAP_SYS_ADMIN) and ip(8); Available says
// whether both are there.
package netns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// runDir is where `ip netns add` mounts the namespaces it names.
const runDir = "/run/netns"

// Available is nil when this process can make network namespaces: it runs
// as root and ip(8) is on the PATH.
func Available() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("netns: a network namespace needs root (running as uid %d)", os.Geteuid())
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return fmt.Errorf("netns: ip(8) not found: %w", err)
	}
	return nil
}

// Namespace is a named network namespace with its loopback up.
type Namespace struct {
	Name string
	path string
}

// Create makes the namespace name (`ip netns add`) and brings its loopback
// up. A namespace of that name left by an earlier run that could not clean
// up (killed with SIGKILL) is deleted first, so a fixed name per caller
// never accumulates.
func Create(ctx context.Context, name string) (*Namespace, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	n := &Namespace{Name: name, path: filepath.Join(runDir, name)}
	if _, err := os.Stat(n.path); err == nil {
		if err := n.Delete(ctx); err != nil {
			return nil, fmt.Errorf("netns: a stale %s: %w", name, err)
		}
	}
	if err := ip(ctx, "netns", "add", name); err != nil {
		return nil, err
	}
	if err := ip(ctx, "-n", name, "link", "set", "lo", "up"); err != nil {
		return nil, errors.Join(err, n.Delete(context.WithoutCancel(ctx)))
	}
	return n, nil
}

// Delete removes the namespace's name (`ip netns del`). Processes still
// inside keep it alive, unnamed, until they exit; a namespace already gone
// is not an error.
func (n *Namespace) Delete(ctx context.Context) error {
	if _, err := os.Stat(n.path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return ip(ctx, "netns", "del", n.Name)
}

// Command is the argv that runs argv inside the namespace (`ip netns exec`,
// which execs it: the process started is argv's, with its pid, so signals
// sent to it reach argv).
func (n *Namespace) Command(argv ...string) []string {
	return append([]string{"ip", "netns", "exec", n.Name}, argv...)
}

// Listen opens a TCP listener on addr inside the namespace.
func (n *Namespace) Listen(addr string) (ln net.Listener, err error) {
	err = n.do(func() error {
		ln, err = net.Listen("tcp", addr)
		return err
	})
	return ln, err
}

// Dial connects to addr inside the namespace.
func (n *Namespace) Dial(ctx context.Context, addr string) (c net.Conn, err error) {
	err = n.do(func() error {
		var d net.Dialer
		c, err = d.DialContext(ctx, "tcp", addr)
		return err
	})
	return c, err
}

// do runs f on an OS thread that joined the namespace, and brings the
// thread back to the namespace it came from before handing it back to the
// scheduler, so no other goroutine ever runs in the namespace.
//
// The thread must survive: ending it (LockOSThread without Unlock, the
// usual way to discard a thread whose state changed) would kill every
// child process it had forked with Pdeathsig set, as the harness starts
// the services, since that signal follows the parent thread, not the
// parent process. Only when the way back fails is the thread left locked
// and so ended with its goroutine.
func (n *Namespace) do(f func() error) error {
	errc := make(chan error, 1)
	go func() { // owned by do, which waits for it
		runtime.LockOSThread()
		home, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netns: this thread's namespace: %w", err)
			return
		}
		defer func() { _ = unix.Close(home) }()
		fd, err := unix.Open(n.path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netns: open %s: %w", n.path, err)
			return
		}
		defer func() { _ = unix.Close(fd) }()
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netns: join %s: %w", n.Name, err)
			return
		}
		ferr := f()
		if err := unix.Setns(home, unix.CLONE_NEWNET); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("netns: leave %s: %w", n.Name, err)) // the thread stays locked and ends
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

func ip(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("netns: ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
