package client

import (
	"errors"

	"google.golang.org/grpc/credentials"

	"github.com/sundialhq/sundial/pkg/process/connsec"
)

// TLSFiles say how a client verifies the api, and what it presents when
// the api requires a client certificate (mutual TLS).
type TLSFiles struct {
	// CAFile is a PEM bundle of the CAs that sign the api's certificate;
	// empty: the system's roots.
	CAFile string
	// ServerName is the name the api's certificate must carry when it is
	// not the host of the target (an IP, a port-forward).
	ServerName string
	// CertFile and KeyFile are a client certificate and its key, both or
	// neither. They are read again at each TLS handshake, so a renewed
	// certificate is used by the next connection without a new Client.
	CertFile, KeyFile string
}

// TLSCredentials are transport credentials for WithTLS that verify the
// api's certificate as f says. The CA bundle is read once, here; an error
// names the file that does not load.
//
//	creds, err := client.TLSCredentials(client.TLSFiles{CAFile: "/etc/sundial/ca.crt"})
//	...
//	c, err := client.New("sundial-api:9090", token, client.WithTLS(creds))
func TLSCredentials(f TLSFiles) (credentials.TransportCredentials, error) {
	if (f.CertFile == "") != (f.KeyFile == "") {
		return nil, errors.New("client: TLSFiles needs CertFile and KeyFile together")
	}
	cfg, err := connsec.TLS{Enabled: true, CAFile: f.CAFile, ServerName: f.ServerName, CertFile: f.CertFile, KeyFile: f.KeyFile}.Config()
	if err != nil {
		return nil, err
	}
	return credentials.NewTLS(cfg), nil
}
