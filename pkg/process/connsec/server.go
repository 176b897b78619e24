package connsec

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sundialhq/sundial/pkg/process/config"
)

// ServerTLS is how a service serves TLS on listeners of its own (the api's
// gRPC and HTTP ports): the certificate it presents and, for mutual TLS,
// the CAs whose client certificates it accepts. Every file is read again
// when it changes (see Load), so a renewed certificate or CA bundle is
// served without a restart.
type ServerTLS struct {
	// CertFile and KeyFile are the server's certificate (with its chain,
	// leaf first) and key, PEM; both or neither. Empty: no TLS.
	CertFile string
	KeyFile  string
	// ClientCAFile, when set, makes every client present a certificate
	// signed by one of these CAs (mutual TLS); a client without one is
	// refused during the handshake, before any call is read.
	ClientCAFile string
	// MinVersion is the oldest TLS version accepted: "1.2" (the default)
	// or "1.3".
	MinVersion string
}

// Register adds --tls-cert-file, --tls-key-file, --tls-client-ca-file and
// --tls-min-version to fs; what names the listeners in their help.
func (s *ServerTLS) Register(fs *flag.FlagSet, what string) {
	fs.StringVar(&s.CertFile, "tls-cert-file", s.CertFile, "PEM certificate (leaf first, then its chain) served on "+what+"; with --tls-key-file it turns TLS on (empty: plaintext). Read again when the file changes")
	fs.StringVar(&s.KeyFile, "tls-key-file", s.KeyFile, "PEM key of --tls-cert-file")
	fs.StringVar(&s.ClientCAFile, "tls-client-ca-file", s.ClientCAFile, "PEM CAs whose client certificates "+what+" require (mutual TLS); empty: no client certificate asked for. Read again when the file changes")
	fs.StringVar(&s.MinVersion, "tls-min-version", s.MinVersion, "oldest TLS version accepted: 1.2 or 1.3 (empty: 1.2)")
}

// Enabled reports whether a certificate is configured.
func (s ServerTLS) Enabled() bool { return s.CertFile != "" || s.KeyFile != "" }

// Validate records problems, each naming its flag. Every file is loaded
// once, so a certificate that does not match its key, or a CA file without
// a certificate, stops the service at start.
func (s ServerTLS) Validate(p *config.Problems) {
	if _, err := tlsVersion(s.MinVersion); err != nil {
		p.Addf("tls-min-version", "%v", err)
	}
	if !s.Enabled() {
		if s.ClientCAFile != "" {
			p.Addf("tls-client-ca-file", "has no effect without --tls-cert-file")
		}
		if s.MinVersion != "" {
			p.Addf("tls-min-version", "has no effect without --tls-cert-file")
		}
		return
	}
	switch {
	case s.CertFile == "":
		p.Addf("tls-cert-file", "required with --tls-key-file")
	case s.KeyFile == "":
		p.Addf("tls-key-file", "required with --tls-cert-file")
	default:
		if _, err := loadServerCert(s.CertFile, s.KeyFile); err != nil {
			p.Addf("tls-cert-file", "%v", err)
		}
	}
	if s.ClientCAFile != "" {
		if _, err := loadCAs(s.ClientCAFile); err != nil {
			p.Addf("tls-client-ca-file", "%v", err)
		}
	}
}

// ValidateClientCA checks a second client-CA file (another listener's,
// named by flag) against the same certificate.
func (s ServerTLS) ValidateClientCA(p *config.Problems, flagName, file string) {
	if file == "" {
		return
	}
	if !s.Enabled() {
		p.Addf(flagName, "has no effect without --tls-cert-file")
		return
	}
	if _, err := loadCAs(file); err != nil {
		p.Addf(flagName, "%v", err)
	}
}

func tlsVersion(v string) (uint16, error) {
	switch v {
	case "", "1.2":
		return tls.VersionTLS12, nil
	case "1.3":
		return tls.VersionTLS13, nil
	}
	return 0, fmt.Errorf("must be 1.2 or 1.3, got %q", v)
}

// loadServerCert loads a key pair and parses its leaf, so the expiry and
// names can be logged.
func loadServerCert(certFile, keyFile string) (*tls.Certificate, error) {
	c, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		// The error names the files, never what is in them.
		return nil, err
	}
	if c.Leaf == nil {
		if c.Leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
			return nil, fmt.Errorf("%s: %w", certFile, err)
		}
	}
	return &c, nil
}

// ServerCerts is a listener's TLS material, kept current: each handshake
// first looks at the files' sizes and modification times (one stat each),
// and loads them again when they changed. A change that does not load (a
// certificate written before its key, a truncated file) is logged and the
// previous material kept, so a rotation in progress never takes the
// listener down; the next change is tried again. The kubelet replaces a
// mounted Secret's files at once (a symlink swap), cert-manager and
// certbot rewrite them in place: both are picked up by the next
// connection. Connections already open keep the certificate they
// started with.
type ServerCerts struct {
	minVersion uint16
	cert       *watched[*tls.Certificate]
	cas        *watched[*x509.CertPool] // nil: no client certificates
}

// Load reads the files once (an error names the file) and returns the
// material that keeps them current; logger records each reload. It fails
// without a certificate.
func (s ServerTLS) Load(logger *slog.Logger) (*ServerCerts, error) {
	if !s.Enabled() {
		return nil, errors.New("connsec: no server certificate configured")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	version, err := tlsVersion(s.MinVersion)
	if err != nil {
		return nil, fmt.Errorf("tls-min-version: %w", err)
	}
	sc := &ServerCerts{minVersion: version}
	sc.cert, err = watch(logger, "server certificate", []string{s.CertFile, s.KeyFile},
		func() (*tls.Certificate, error) { return loadServerCert(s.CertFile, s.KeyFile) }, certAttrs)
	if err != nil {
		return nil, err
	}
	if s.ClientCAFile != "" {
		sc.cas, err = watch(logger, "client CAs", []string{s.ClientCAFile},
			func() (*x509.CertPool, error) { return loadCAs(s.ClientCAFile) }, nil)
		if err != nil {
			return nil, err
		}
	}
	return sc, nil
}

// MutualTLS reports whether clients must present a certificate.
func (c *ServerCerts) MutualTLS() bool { return c.cas != nil }

// Leaf is the certificate served now (reloading it first if its files
// changed).
func (c *ServerCerts) Leaf() *x509.Certificate { return c.cert.get().Leaf }

// Config is a server tls.Config for one listener, offering nextProtos
// through ALPN ("h2" for gRPC; "h2", "http/1.1" for HTTP). Each handshake
// gets the current certificate and client CAs.
func (c *ServerCerts) Config(nextProtos ...string) *tls.Config {
	protos := slices.Clone(nextProtos)
	return &tls.Config{
		MinVersion: c.minVersion,
		NextProtos: protos,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cfg := &tls.Config{
				MinVersion:   c.minVersion,
				NextProtos:   protos,
				Certificates: []tls.Certificate{*c.cert.get()},
			}
			if c.cas != nil {
				cfg.ClientAuth = tls.RequireAndVerifyClientCert
				cfg.ClientCAs = c.cas.get()
			}
			return cfg, nil
		},
	}
}

// certAttrs describe a loaded certificate in the reload log: what a person
// checking a rotation wants to see, nothing secret.
func certAttrs(c *tls.Certificate) []any {
	return []any{"subject", c.Leaf.Subject.String(), "dns_names", c.Leaf.DNSNames,
		"not_after", c.Leaf.NotAfter.UTC().Format(time.RFC3339), "serial", c.Leaf.SerialNumber.Text(16)}
}

// watched is a value loaded from files, loaded again when one of them
// changes.
type watched[T any] struct {
	what  string
	files []string
	load  func() (T, error)
	attrs func(T) []any
	log   *slog.Logger

	mu     sync.Mutex
	stamps []stamp // of the files when last loaded or tried
	value  T
}

// stamp is what a stat says about a file: enough to see it was replaced
// or rewritten. The inode tells a file swapped in (the kubelet's symlink
// swap, a rename over it) from the one before even when both were written
// within one tick of the file system's clock and have the same size, as
// two keys of one kind do.
type stamp struct {
	mod   time.Time
	size  int64
	inode uint64
	err   bool
}

func stampsOf(files []string) []stamp {
	out := make([]stamp, len(files))
	for i, f := range files {
		st, err := os.Stat(f) // follows the kubelet's ..data symlink
		if err != nil {
			out[i] = stamp{err: true}
			continue
		}
		out[i] = stamp{mod: st.ModTime(), size: st.Size()}
		if sys, ok := st.Sys().(*syscall.Stat_t); ok {
			out[i].inode = uint64(sys.Ino) // Ino is narrower on some platforms
		}
	}
	return out
}

func watch[T any](log *slog.Logger, what string, files []string, load func() (T, error), attrs func(T) []any) (*watched[T], error) {
	w := &watched[T]{what: what, files: files, load: load, attrs: attrs, log: log, stamps: stampsOf(files)}
	v, err := load()
	if err != nil {
		return nil, err
	}
	w.value = v
	return w, nil
}

func (w *watched[T]) get() T {
	stamps := stampsOf(w.files)
	w.mu.Lock()
	defer w.mu.Unlock()
	if slices.Equal(stamps, w.stamps) {
		return w.value
	}
	w.stamps = stamps
	v, err := w.load()
	if err != nil {
		w.log.Warn("tls files changed but do not load; still serving the previous ones", "what", w.what,
			"files", strings.Join(w.files, ","), "err", err)
		return w.value
	}
	w.value = v
	attrs := []any{"what", w.what, "files", strings.Join(w.files, ",")}
	if w.attrs != nil {
		attrs = append(attrs, w.attrs(v)...)
	}
	w.log.Info("tls files reloaded", attrs...)
	return w.value
}

// IsLoopback reports whether a listen or dial address (host:port) names
// only this machine: a loopback IP or "localhost". An empty host (every
// interface) is not loopback.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
