package testinfra

import (
	"fmt"
	"net"
	"net/url"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
)

func TestUniqueName(t *testing.T) {
	valid := regexp.MustCompile(`^[a-z][a-z0-9_]*_[0-9a-f]{8}$`)
	for _, max := range []int{12, 20, 48, 63, 200} {
		a, b := UniqueName(t, max), UniqueName(t, max)
		if a == b {
			t.Errorf("UniqueName(%d) repeated %q", max, a)
		}
		if len(a) > max || !valid.MatchString(a) {
			t.Errorf("UniqueName(%d) = %q: want at most %d bytes matching %s", max, a, max, valid)
		}
	}
	t.Run("Sub/Test With Spaces-and.dots", func(t *testing.T) {
		n := UniqueName(t, 63)
		if !strings.HasPrefix(n, "testuniquename_sub_test_with_spaces_and_dots_") {
			t.Errorf("UniqueName = %q: want the sanitized test name first", n)
		}
	})
	t.Run("123 starts with a digit", func(t *testing.T) {
		if n := UniqueName(t, 63); !valid.MatchString(n) {
			t.Errorf("UniqueName = %q: want a leading letter", n)
		}
	})
}

func TestWithSearchPath(t *testing.T) {
	dsn := WithSearchPath("postgres://u:p@127.0.0.1:5433/db?sslmode=disable&options=-c%20x%3D1", "t_abc")
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(u.RawQuery, "options=-c%20search_path%3Dt_abc") {
		t.Errorf("query %q: want the space encoded as %%20 (libpq and pgx read '+' literally)", u.RawQuery)
	}
	q := u.Query()
	if got := q.Get("options"); got != "-c search_path=t_abc" {
		t.Errorf("options = %q, want the search_path alone", got)
	}
	if q.Get("sslmode") != "disable" || u.Host != "127.0.0.1:5433" || u.Path != "/db" || u.User.String() != "u:p" {
		t.Errorf("WithSearchPath changed more than options: %s", dsn)
	}
}

func TestSplitList(t *testing.T) {
	got := splitList(" a:1, ,b:2,")
	if strings.Join(got, "|") != "a:1|b:2" {
		t.Errorf("splitList = %q", got)
	}
}

// fatalRecorder is a testing.TB whose Fatalf records the message and ends the
// calling goroutine, as the real one does.
type fatalRecorder struct {
	testing.TB
	mu  sync.Mutex
	msg string
}

func (f *fatalRecorder) Helper() {}
func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.msg = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

// runHelper calls fn with a recorder in a goroutine of its own (Fatalf ends
// that goroutine) and returns the fatal message, if any.
func runHelper(t *testing.T, fn func(tb testing.TB)) string {
	rec := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(rec)
	}()
	<-done
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.msg
}

// A stopped component fails the test, naming the address, the variable and
// the command that starts the infrastructure; it never skips.
func TestUnreachableComponentFailsWithInstructions(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	_ = ln.Close()

	t.Setenv(EnvPostgresDSN, "postgres://sundial:sundial@"+dead+"/sundial?sslmode=disable")
	t.Setenv(EnvRedisAddr, dead)
	t.Setenv(EnvZooKeeperAddrs, dead)
	t.Setenv(EnvKafkaBrokers, dead)
	t.Setenv(EnvCassandraHosts, dead)
	for name, call := range map[string]func(tb testing.TB){
		EnvPostgresDSN:    func(tb testing.TB) { PostgresDSN(tb) },
		EnvRedisAddr:      func(tb testing.TB) { Redis(tb) },
		EnvZooKeeperAddrs: func(tb testing.TB) { ZooKeeper(tb) },
		EnvKafkaBrokers:   func(tb testing.TB) { KafkaTopic(tb, 1) },
		EnvCassandraHosts: func(tb testing.TB) { Cassandra(tb) },
	} {
		msg := runHelper(t, call)
		for _, want := range []string{dead, name, "make infra-up"} {
			if !strings.Contains(msg, want) {
				t.Errorf("%s unreachable: message %q does not mention %q", name, msg, want)
			}
		}
	}
}
