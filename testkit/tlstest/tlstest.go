// Package tlstest makes TLS material for tests: a CA of the test's
// own, and server and client certificates it signs, written as PEM files
// into the test's temporary directory, so a test can start a real server
// with --tls-cert-file and point a real client at --ca; and an HTTPS
// server that demands a client certificate, to check a client's. Everything
// expires an hour after it is made.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority made for one test.
type CA struct {
	t    testing.TB
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// CertFile is the CA's certificate, PEM: what a client is given as
	// its CA bundle, or a server as its client CAs.
	CertFile string
}

// NewCA makes a CA named name.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{t: t, dir: t.TempDir(), cert: cert, key: key}
	ca.CertFile = ca.write(name+"-ca.crt", "CERTIFICATE", der)
	return ca
}

// Pool is a certificate pool holding the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// Issued is a certificate and its key, as files and loaded.
type Issued struct {
	CertFile, KeyFile string
	Pair              tls.Certificate
}

// Server issues a server certificate for hosts (names or IP addresses;
// none: localhost and 127.0.0.1), written as <name>.crt and <name>.key.
func (ca *CA) Server(name string, hosts ...string) Issued {
	if len(hosts) == 0 {
		hosts = []string{"localhost", "127.0.0.1"}
	}
	tmpl := &x509.Certificate{Subject: pkix.Name{CommonName: hosts[0]}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return ca.issue(name, tmpl)
}

// Client issues a client certificate whose common name is cn, written as
// <name>.crt and <name>.key.
func (ca *CA) Client(name, cn string) Issued {
	return ca.issue(name, &x509.Certificate{Subject: pkix.Name{CommonName: cn}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
}

func (ca *CA) issue(name string, tmpl *x509.Certificate) Issued {
	ca.t.Helper()
	key := newKey(ca.t)
	tmpl.SerialNumber = serial(ca.t)
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		ca.t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		ca.t.Fatal(err)
	}
	out := Issued{
		CertFile: ca.write(name+".crt", "CERTIFICATE", der),
		KeyFile:  ca.write(name+".key", "PRIVATE KEY", keyDER),
	}
	if out.Pair, err = tls.LoadX509KeyPair(out.CertFile, out.KeyFile); err != nil {
		ca.t.Fatal(err)
	}
	return out
}

// MutualTLSServer starts an HTTPS server, closed when the test ends, that
// presents cert and lets in only a client whose certificate clientCAs
// verifies; whoever it lets in gets 204 No Content. A client that reaches
// it has checked the server's certificate and passed its own.
func MutualTLSServer(t testing.TB, cert tls.Certificate, clientCAs *x509.CertPool) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: clientCAs, ClientAuth: tls.RequireAndVerifyClientCert}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

func (ca *CA) write(name, typ string, der []byte) string {
	ca.t.Helper()
	p := filepath.Join(ca.dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		ca.t.Fatal(err)
	}
	return p
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}
