package harness

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/sundialhq/sundial/pkg/domain/auth"
	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// Config describes a deployment. BinDir, Namespace and LogDir are required.
type Config struct {
	BinDir    string // holds sundial-<service> (see Build)
	Infra     Infra
	Namespace *Namespace
	LogDir    string // each process logs to <LogDir>/<name>.log
	Logger    *slog.Logger

	Token  string // the api's bearer token (default "harness-token")
	Tenant string // its tenant (default "harness")
	// Secret is the platform's signing secret, given to the workers only
	// when set; it signs nothing unless they also get
	// --platform-signature-until (a migration). The tenants' own keys
	// sign every request (Namespace.SigningKEK, Sink).
	Secret string

	// Env is extra environment for every process (KEY=VALUE), applied after
	// the platform's own settings so it can override them. Variables named
	// SUNDIAL_* in the caller's environment are not passed on: a deployment
	// is configured here and by the start arguments only.
	Env []string
	// Pprof serves /debug/pprof on every admin server.
	Pprof bool
	// TLS secures the api's gRPC and HTTP ports (the zero value is
	// plaintext). Under TLS or MutualTLS the first StartAPI has
	// `sundial-api dev-tls` sign the api's certificates in <LogDir>/tls with
	// the development CA (Infra.CAFile), and Conn and HTTPClient verify the
	// api with that CA.
	TLS TLSMode
	// ReadyTimeout bounds each start-up (default 90 s); StopTimeout each
	// graceful stop before SIGKILL (default 40 s).
	ReadyTimeout time.Duration
	StopTimeout  time.Duration
}

// Platform is one deployment's running service processes.
type Platform struct {
	cfg Config
	log *slog.Logger

	mu       sync.Mutex
	procs    []*Process
	grpcAddr string
	conn     *grpc.ClientConn
	tls      string // <LogDir>/tls once dev-tls signed the certificates there
	kekFile  string // the namespace's SigningKEK, for the api and workers
}

// NewPlatform checks cfg and fills its defaults; it starts nothing.
func NewPlatform(cfg Config) (*Platform, error) {
	switch {
	case cfg.BinDir == "":
		return nil, errors.New("harness: Config.BinDir is required")
	case cfg.Namespace == nil:
		return nil, errors.New("harness: Config.Namespace is required")
	case cfg.LogDir == "":
		return nil, errors.New("harness: Config.LogDir is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Token == "" {
		cfg.Token = "harness-token"
	}
	if cfg.Tenant == "" {
		cfg.Tenant = "harness"
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = 90 * time.Second
	}
	if cfg.StopTimeout <= 0 {
		cfg.StopTimeout = 40 * time.Second
	}
	if cfg.TLS < Plaintext || cfg.TLS > MutualTLS {
		return nil, fmt.Errorf("harness: Config.TLS is %v", cfg.TLS)
	}
	if err := os.MkdirAll(cfg.LogDir, 0o755); err != nil {
		return nil, err
	}
	p := &Platform{cfg: cfg, log: cfg.Logger, kekFile: filepath.Join(cfg.LogDir, "signing-kek")}
	if err := os.WriteFile(p.kekFile, cfg.Namespace.SigningKEK, 0o600); err != nil {
		return nil, fmt.Errorf("harness: key-encryption key file: %w", err)
	}
	return p, nil
}

// Secret is the platform's signing secret (Config.Secret), if any.
func (p *Platform) Secret() []byte { return []byte(p.cfg.Secret) }

// Tenant is the tenant the api token belongs to.
func (p *Platform) Tenant() string { return p.cfg.Tenant }

// Namespace is the deployment's namespace.
func (p *Platform) Namespace() *Namespace { return p.cfg.Namespace }

// env is every process's environment: the infrastructure addresses and the
// namespace, as SUNDIAL_* variables, which every service reads for the
// flags it has and ignores otherwise.
func (p *Platform) env(admin string) []string {
	var e []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SUNDIAL_") {
			e = append(e, kv)
		}
	}
	ns, in := p.cfg.Namespace, p.cfg.Infra
	set := func(k, v string) { e = append(e, "SUNDIAL_"+k+"="+v) }
	set("POSTGRES_DSN", ns.PostgresDSN)
	set("REDIS_ADDR", in.RedisAddr)
	set("REDIS_KEY_PREFIX", ns.RedisPrefix)
	set("ZK_ADDRS", strings.Join(in.ZooKeeperAddrs, ","))
	set("KAFKA_BROKERS", strings.Join(in.KafkaBrokers, ","))
	set("CASSANDRA_HOSTS", strings.Join(in.CassandraHosts, ","))
	set("CASSANDRA_KEYSPACE", ns.Keyspace)
	set("TOPIC_PREFIX", ns.TopicPrefix)
	set("GROUP", ns.Group)
	set("ELECTION_PATH", ns.ElectionPath)
	set("SIGNING_KEY_ENCRYPTION_KEY_FILE", p.kekFile)
	if p.cfg.Secret != "" {
		set("SIGNING_SECRET", p.cfg.Secret)
	}
	set("ADMIN_ADDR", admin)
	set("LOG_FORMAT", "text")
	set("LOG_LEVEL", "info")
	set("DRAIN_TIMEOUT", "20s")
	if p.cfg.Pprof {
		set("PPROF", "true")
	}
	return append(e, p.cfg.Env...)
}

// FreeAddr is a loopback address that was free a moment ago.
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// StartAPI starts an api process under name on a free gRPC address, with
// the platform's token and TLS mode; Client talks to the last api started.
func (p *Platform) StartAPI(ctx context.Context, name string, args ...string) (*Process, error) {
	addr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	tlsArgs, err := p.apiTLSArgs(ctx)
	if err != nil {
		return nil, err
	}
	args = append(append([]string{"--grpc-addr", addr, "--tokens", p.cfg.Token + "=" + p.cfg.Tenant}, tlsArgs...), args...)
	pr, err := p.Start(ctx, name, "api", args...)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.grpcAddr = addr
	p.mu.Unlock()
	return pr, nil
}

// Start runs service (api, prefetcher, relay, worker) as a process called
// name with args, and waits until its /readyz answers 200.
func (p *Platform) Start(ctx context.Context, name, service string, args ...string) (*Process, error) {
	admin, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(p.cfg.LogDir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(filepath.Join(p.cfg.BinDir, Binary(service)), args...)
	cmd.Env = p.env(admin)
	cmd.Stdout, cmd.Stderr = f, f
	// If this process dies without stopping its children (a panic, SIGKILL),
	// the kernel kills them rather than leave a deployment running.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("harness: start %s: %w", name, err)
	}
	pr := &Process{Name: name, Service: service, Admin: admin, LogPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() { // owned by the process: it ends when the process does
		pr.err = cmd.Wait()
		f.Close()
		close(pr.done)
	}()
	p.mu.Lock()
	p.procs = append(p.procs, pr)
	p.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, p.cfg.ReadyTimeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-pr.done:
			return nil, fmt.Errorf("harness: %s exited during start-up: %v\n%s", name, pr.err, Tail(logPath, 40))
		default:
		}
		if httpOK(ctx, "http://"+admin+"/readyz") {
			p.log.Info("process ready", "name", name, "pid", pr.Pid(), "admin", admin)
			return pr, nil
		}
		select {
		case <-ctx.Done():
			_ = pr.Kill()
			return nil, fmt.Errorf("harness: %s not ready within %s: %w\n%s", name, p.cfg.ReadyTimeout, ctx.Err(), Tail(logPath, 40))
		case <-tick.C:
		}
	}
}

func httpOK(ctx context.Context, url string) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// Processes lists the processes started so far, running or not.
func (p *Platform) Processes() []*Process {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*Process(nil), p.procs...)
}

// Conn is a gRPC connection to the last api started, authenticated as the
// platform's tenant and, under TLS, verifying the api with the platform's
// CA; the platform closes it on Stop.
func (p *Platform) Conn() (*grpc.ClientConn, error) {
	creds, err := p.transportCredentials()
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn != nil {
		return p.conn, nil
	}
	if p.grpcAddr == "" {
		return nil, errors.New("harness: no api started")
	}
	conn, err := grpc.NewClient(p.grpcAddr,
		grpc.WithTransportCredentials(creds),
		grpc.WithPerRPCCredentials(auth.Bearer(p.cfg.Token)))
	if err != nil {
		return nil, err
	}
	p.conn = conn
	return conn, nil
}

// Client is a JobService client on Conn.
func (p *Platform) Client() (sundialv1.JobServiceClient, error) {
	conn, err := p.Conn()
	if err != nil {
		return nil, err
	}
	return sundialv1.NewJobServiceClient(conn), nil
}

// Stop closes the gRPC connection and stops every running process
// gracefully, the last started first. It returns the processes that did
// not drain in time (they were killed).
func (p *Platform) Stop() error {
	p.mu.Lock()
	procs := p.procs
	conn := p.conn
	p.conn = nil
	p.mu.Unlock()
	if conn != nil {
		_ = conn.Close()
	}
	var errs []error
	for i := len(procs) - 1; i >= 0; i-- {
		if err := procs[i].Stop(p.cfg.StopTimeout); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Process is one running service process.
type Process struct {
	Name    string
	Service string
	Admin   string // host:port of its admin server (/metrics, /readyz, /debug/pprof)
	LogPath string

	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Pid is the process id.
func (pr *Process) Pid() int { return pr.cmd.Process.Pid }

// Done is closed once the process has exited.
func (pr *Process) Done() <-chan struct{} { return pr.done }

// Alive reports whether the process has not exited yet.
func (pr *Process) Alive() bool {
	select {
	case <-pr.done:
		return false
	default:
		return true
	}
}

// ExitErr is how the process ended (valid once Done is closed).
func (pr *Process) ExitErr() error { <-pr.done; return pr.err }

// Kill sends SIGKILL (no drain) and waits for the process to exit.
func (pr *Process) Kill() error {
	if !pr.Alive() {
		return nil
	}
	if err := pr.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	<-pr.done
	return nil
}

// Stop sends SIGTERM and waits up to timeout for a graceful exit, then
// kills. A process that already exited is left alone.
func (pr *Process) Stop(timeout time.Duration) error {
	if !pr.Alive() {
		return nil
	}
	_ = pr.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-pr.done:
		if pr.err != nil {
			return fmt.Errorf("harness: %s: %w\n%s", pr.Name, pr.err, Tail(pr.LogPath, 20))
		}
		return nil
	case <-t.C:
		_ = pr.Kill()
		return fmt.Errorf("harness: %s did not drain within %s\n%s", pr.Name, timeout, Tail(pr.LogPath, 20))
	}
}

// Tail is the last n lines of the file at path.
func Tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}
