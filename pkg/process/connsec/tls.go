package connsec

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/sundialhq/sundial/pkg/process/config"
)

// TLS is whether and how one component's connections use TLS.
type TLS struct {
	Enabled bool
	// CAFile is a PEM bundle of the CAs that sign the servers' certificates;
	// empty: the system's roots.
	CAFile string
	// CertFile and KeyFile are a client certificate and its key, for
	// servers that require one (mutual TLS); both or neither.
	CertFile string
	KeyFile  string
	// ServerName is the name the servers' certificates must carry; empty:
	// the host each address names.
	ServerName string
	// InsecureSkipVerify accepts any server certificate. For a first test
	// against a self-signed server only: it gives up on knowing who is at
	// the other end.
	InsecureSkipVerify bool
}

// Register adds --<prefix>-tls and its --<prefix>-tls-* settings to fs;
// component names the servers in their help ("Redis", "the Kafka
// brokers").
func (t *TLS) Register(fs *flag.FlagSet, prefix, component string) {
	fs.BoolVar(&t.Enabled, prefix+"-tls", t.Enabled, "connect to "+component+" over TLS")
	fs.StringVar(&t.CAFile, prefix+"-tls-ca-file", t.CAFile, "PEM file of the CAs that sign "+component+"'s certificates (empty: the system's roots)")
	fs.StringVar(&t.CertFile, prefix+"-tls-cert-file", t.CertFile, "PEM client certificate presented to "+component+" (with --"+prefix+"-tls-key-file), read again at each handshake")
	fs.StringVar(&t.KeyFile, prefix+"-tls-key-file", t.KeyFile, "PEM key of --"+prefix+"-tls-cert-file")
	fs.StringVar(&t.ServerName, prefix+"-tls-server-name", t.ServerName, "name "+component+"'s certificates must carry (empty: the host of each address)")
	fs.BoolVar(&t.InsecureSkipVerify, prefix+"-tls-insecure-skip-verify", t.InsecureSkipVerify, "accept any certificate from "+component+" (testing only: anyone on the path can impersonate it)")
}

// Validate records problems, each naming its --<prefix>-tls* flag: a
// setting given without --<prefix>-tls, a CA bundle or client certificate
// that does not load.
func (t TLS) Validate(p *config.Problems, prefix string) {
	if !t.Enabled {
		for name, set := range map[string]bool{
			"ca-file": t.CAFile != "", "cert-file": t.CertFile != "", "key-file": t.KeyFile != "",
			"server-name": t.ServerName != "", "insecure-skip-verify": t.InsecureSkipVerify,
		} {
			if set {
				p.Addf(prefix+"-tls-"+name, "has no effect without --%s-tls", prefix)
			}
		}
		return
	}
	if t.InsecureSkipVerify && t.CAFile != "" {
		p.Addf(prefix+"-tls-insecure-skip-verify", "skips the verification --%s-tls-ca-file is for; give one of them", prefix)
	}
	if t.CAFile != "" {
		if _, err := loadCAs(t.CAFile); err != nil {
			p.Addf(prefix+"-tls-ca-file", "%v", err)
		}
	}
	switch {
	case t.CertFile != "" && t.KeyFile == "":
		p.Addf(prefix+"-tls-key-file", "required with --%s-tls-cert-file", prefix)
	case t.CertFile == "" && t.KeyFile != "":
		p.Addf(prefix+"-tls-cert-file", "required with --%s-tls-key-file", prefix)
	case t.CertFile != "":
		if _, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile); err != nil {
			p.Addf(prefix+"-tls-cert-file", "%v", err)
		}
	}
}

// Config is the client TLS configuration, or nil when TLS is off. It fails
// if the CA bundle or the client certificate cannot be loaded.
func (t TLS) Config() (*tls.Config, error) {
	if !t.Enabled {
		return nil, nil
	}
	cfg := &tls.Config{
		ServerName:         t.ServerName,
		InsecureSkipVerify: t.InsecureSkipVerify, //nolint:gosec // an explicit, documented opt-in
	}
	if t.CAFile != "" {
		pool, err := loadCAs(t.CAFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if t.CertFile != "" || t.KeyFile != "" {
		// Loaded now so a bad pair fails at start, and again at each
		// handshake so a renewed certificate (cert-manager rewrites the
		// mounted Secret) is presented without a restart. Handshakes happen
		// only when a connection opens, so the reads are rare.
		if _, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile); err != nil {
			return nil, fmt.Errorf("client certificate: %w", err)
		}
		certFile, keyFile := t.CertFile, t.KeyFile
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			c, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				return nil, fmt.Errorf("client certificate: %w", err)
			}
			return &c, nil
		}
	}
	return cfg, nil
}

// errNoCertificates is returned for a CA file without a PEM certificate.
var errNoCertificates = errors.New("holds no PEM certificate")

func loadCAs(file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s %w", file, errNoCertificates)
	}
	return pool, nil
}
