package main

// `sundial-api dev-tls`: a local CA and the certificates `make run` serves
// the api with, so the development platform speaks TLS like a production
// one and schedctl verifies it (--ca). Development only: the CA's key sits
// beside its certificate, readable by whoever can read the directory.

import (
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

// The files dev-tls writes in its directory.
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
// when they cannot be written, 2 for bad flags.
func devTLSMain(args []string, stdout, stderr io.Writer, now time.Time) int {
	fs := flag.NewFlagSet("sundial-api dev-tls", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", ".run/tls", "directory of the CA and certificates (created 0700)")
	client := fs.String("client-name", "dev", "common name of the client certificate (client.crt), for trying --tls-client-ca-file")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 || *dir == "" || *client == "" {
		fmt.Fprintln(stderr, "sundial-api dev-tls: --dir and --client-name must not be empty, and no arguments are taken")
		return 2
	}
	made, err := devTLS(*dir, *client, now)
	if err != nil {
		fmt.Fprintf(stderr, "sundial-api dev-tls: %v\n", err)
		return 1
	}
	verb := "kept"
	if made {
		verb = "made"
	}
	fmt.Fprintf(stdout, "%s a development CA %s and, signed by it, the api's certificate %s (localhost, 127.0.0.1, ::1) and a client certificate %s\n",
		verb, filepath.Join(*dir, devCAFile), filepath.Join(*dir, devServerCertFile), filepath.Join(*dir, devClientCertFile))
	return 0
}

// devTLS makes a CA, a server certificate for loopback and a client
// certificate in dir, unless valid ones are there already (so a schedctl
// holding the CA keeps working across runs). It reports whether it made
// new ones.
func devTLS(dir, clientName string, now time.Time) (bool, error) {
	if devTLSValid(dir, now) {
		return false, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return false, err
	}
	ca := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "Sundial development CA", Organization: []string{"Sundial (make run)"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(365 * 24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	if ca.SerialNumber, err = devSerial(); err != nil {
		return false, err
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return false, err
	}
	if ca, err = x509.ParseCertificate(caDER); err != nil {
		return false, err
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
	files := map[string][]byte{devCAFile: pemBlock("CERTIFICATE", caDER)}
	if files[devCAKeyFile], err = pemKey(caKey); err != nil {
		return false, err
	}
	for _, leaf := range []struct {
		tmpl              *x509.Certificate
		certFile, keyFile string
	}{{server, devServerCertFile, devServerKeyFile}, {client, devClientCertFile, devClientKeyFile}} {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return false, err
		}
		leaf.tmpl.NotBefore, leaf.tmpl.NotAfter = now.Add(-time.Hour), now.Add(90*24*time.Hour)
		leaf.tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		if leaf.tmpl.SerialNumber, err = devSerial(); err != nil {
			return false, err
		}
		der, err := x509.CreateCertificate(rand.Reader, leaf.tmpl, ca, &key.PublicKey, caKey)
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
	// (pkg/connsec keeps serving the old pair meanwhile).
	for _, name := range []string{devCAKeyFile, devServerKeyFile, devClientKeyFile, devCAFile, devServerCertFile, devClientCertFile} {
		if err := writeAtomically(filepath.Join(dir, name), files[name]); err != nil {
			return false, err
		}
	}
	return true, nil
}

// devTLSValid reports whether dir holds a server certificate that the CA
// there signs for every loopback name, matches its key, and has more than
// devTLSRenewBefore left; and a client certificate the CA signs.
func devTLSValid(dir string, now time.Time) bool {
	caPEM, err := os.ReadFile(filepath.Join(dir, devCAFile))
	if err != nil {
		return false
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return false
	}
	at := now.Add(devTLSRenewBefore)
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
