package main

// `sundial-api dev-tls`: the certificates `make run` serves the api with,
// so the development platform speaks TLS like a production one and
// schedctl verifies it (--ca).
//
// They are signed by the one development CA, the one deploy/local/infra.sh
// makes in .infra/tls for every component's secure listener, named with
// --ca-dir. Without --ca-dir dev-tls refuses rather than make a CA of its
// own: a second CA would be a second file for schedctl, the browser and the
// tests to trust, and every machine that runs the platform runs infra.sh
// first (make run is infra-up, build, platform.sh up). A machine without
// infra.sh passes the directory of any CA it keeps as ca.crt and ca.key.
// Development only: the CA's key sits beside its certificate.

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// The files dev-tls reads in --ca-dir (infra.sh's names) and writes in --dir.
const (
	devCAFile         = "ca.crt"
	devCAKeyFile      = "ca.key"
	devServerCertFile = "tls.crt"
	devServerKeyFile  = "tls.key"
	devClientCertFile = "client.crt"
	devClientKeyFile  = "client.key"
)

// devTLSRenewBefore is how long before expiry dev-tls makes new files
// rather than keep the ones it finds.
const devTLSRenewBefore = 7 * 24 * time.Hour

// devTLSMain is `sundial-api dev-tls`: exit 0 with the files in place, 1
// when they cannot be written or the CA cannot be read, 2 for bad flags.
func devTLSMain(args []string, stdout, stderr io.Writer, now time.Time) int {
	fs := flag.NewFlagSet("sundial-api dev-tls", flag.ContinueOnError)
	fs.SetOutput(stderr)
	caDir := fs.String("ca-dir", "", "directory of the development CA to sign with: ca.crt and ca.key (deploy/local/infra.sh's .infra/tls); required")
	dir := fs.String("dir", ".run/tls", "directory of the api's certificates (created 0700); not --ca-dir")
	client := fs.String("client-name", "dev", "common name of the client certificate (client.crt), for trying --tls-client-ca-file")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintln(stderr, "sundial-api dev-tls: takes no arguments, only flags")
		return 2
	case *caDir == "":
		fmt.Fprintln(stderr, "sundial-api dev-tls: --ca-dir is required: the directory of the development CA (ca.crt, ca.key) that deploy/local/infra.sh makes in .infra/tls; dev-tls makes no CA of its own")
		return 2
	case *dir == "" || *client == "":
		fmt.Fprintln(stderr, "sundial-api dev-tls: --dir and --client-name must not be empty")
		return 2
	case sameDir(*dir, *caDir):
		fmt.Fprintf(stderr, "sundial-api dev-tls: --dir %s is --ca-dir: the api's certificates go in a directory of their own\n", *dir)
		return 2
	}
	made, err := devTLS(*caDir, *dir, *client, now)
	if err != nil {
		fmt.Fprintf(stderr, "sundial-api dev-tls: %v\n", err)
		return 1
	}
	verb := "kept"
	if made {
		verb = "made"
	}
	fmt.Fprintf(stdout, "%s, signed by the development CA %s, the api's certificate %s (localhost, 127.0.0.1, ::1) and a client certificate %s\n",
		verb, filepath.Join(*caDir, devCAFile), filepath.Join(*dir, devServerCertFile), filepath.Join(*dir, devClientCertFile))
	return 0
}

// sameDir reports whether a and b name one directory.
func sameDir(a, b string) bool {
	aa, err1 := filepath.Abs(a)
	bb, err2 := filepath.Abs(b)
	if err1 != nil || err2 != nil {
		return filepath.Clean(a) == filepath.Clean(b)
	}
	if aa == bb {
		return true
	}
	sa, err1 := os.Stat(aa)
	sb, err2 := os.Stat(bb)
	return err1 == nil && err2 == nil && os.SameFile(sa, sb)
}

// devTLS signs, with the CA in caDir, a server certificate for loopback
// and a client certificate into dir, unless valid ones signed by that CA
// are there already (an api reloading them and a schedctl holding the CA
// keep working across runs). It reports whether it made new ones. A ca.crt
// and ca.key in dir, the CA an older dev-tls made there, are removed, so
// the only CA left to trust is caDir's.
func devTLS(caDir, dir, clientName string, now time.Time) (bool, error) {
	caPath, keyPath := filepath.Join(caDir, devCAFile), filepath.Join(caDir, devCAKeyFile)
	pair, err := tls.LoadX509KeyPair(caPath, keyPath)
	if err != nil {
		return false, fmt.Errorf("the development CA %s with its key %s (deploy/local/infra.sh up makes them): %w", caPath, keyPath, err)
	}
	ca := pair.Leaf
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok || !ca.IsCA || ca.KeyUsage&x509.KeyUsageCertSign == 0 {
		return false, fmt.Errorf("%s is not a CA certificate with a signing key (basicConstraints CA:TRUE, keyUsage keyCertSign)", caPath)
	}
	if !now.Before(ca.NotAfter) {
		return false, fmt.Errorf("the development CA %s expired at %s (rm -rf its directory and run deploy/local/infra.sh up again)", caPath, ca.NotAfter.UTC().Format(time.RFC3339))
	}
	for _, old := range []string{devCAFile, devCAKeyFile} {
		if err := os.Remove(filepath.Join(dir, old)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return false, err
		}
	}
	if devTLSValid(ca, dir, now) {
		return false, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, err
	}
	notAfter := now.Add(90 * 24 * time.Hour)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	server := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "localhost"},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	client := &x509.Certificate{
		Subject:     pkix.Name{CommonName: clientName},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	files := map[string][]byte{}
	for _, leaf := range []struct {
		tmpl              *x509.Certificate
		certFile, keyFile string
	}{{server, devServerCertFile, devServerKeyFile}, {client, devClientCertFile, devClientKeyFile}} {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return false, err
		}
		leaf.tmpl.NotBefore, leaf.tmpl.NotAfter = now.Add(-time.Hour), notAfter
		leaf.tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		if leaf.tmpl.SerialNumber, err = devSerial(); err != nil {
			return false, err
		}
		der, err := x509.CreateCertificate(rand.Reader, leaf.tmpl, ca, &key.PublicKey, signer)
		if err != nil {
			return false, err
		}
		files[leaf.certFile] = pemBlock("CERTIFICATE", der)
		if files[leaf.keyFile], err = pemKey(key); err != nil {
			return false, err
		}
	}
	// Keys before certificates, each renamed into place: an api running
	// on the old files reloads only once a certificate matches its key
	// (pkg/process/connsec keeps serving the old pair meanwhile).
	for _, name := range []string{devServerKeyFile, devClientKeyFile, devServerCertFile, devClientCertFile} {
		if err := writeAtomically(filepath.Join(dir, name), files[name]); err != nil {
			return false, err
		}
	}
	return true, nil
}

// devTLSValid reports whether dir holds a server certificate that ca
// signs for every loopback name, matches its key, and has more than
// devTLSRenewBefore left; and a client certificate ca signs.
func devTLSValid(ca *x509.Certificate, dir string, now time.Time) bool {
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	at := now.Add(devTLSRenewBefore)
	if at.After(ca.NotAfter) {
		// The leaves end with the CA: kept until it expires.
		at = now
	}
	server, err := tls.LoadX509KeyPair(filepath.Join(dir, devServerCertFile), filepath.Join(dir, devServerKeyFile))
	if err != nil {
		return false
	}
	for _, name := range []string{"localhost", "127.0.0.1", "::1"} {
		opts := x509.VerifyOptions{Roots: roots, DNSName: name, CurrentTime: at, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
		if _, err := server.Leaf.Verify(opts); err != nil {
			return false
		}
	}
	client, err := tls.LoadX509KeyPair(filepath.Join(dir, devClientCertFile), filepath.Join(dir, devClientKeyFile))
	if err != nil {
		return false
	}
	_, err = client.Leaf.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: at, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	return err == nil
}

func devSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func pemKey(k *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pemBlock("PRIVATE KEY", der), nil
}

// writeAtomically writes b beside path (0600) and renames it over path.
func writeAtomically(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
