package app

import (
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sundialhq/sundial/pkg/process/connsec"
)

// serverTLS loads the certificate and client CAs of each port: nil, nil
// when TLS is off. The gRPC port offers HTTP/2 alone through ALPN (gRPC
// clients require it), the HTTP port HTTP/2 and HTTP/1.1.
//
// Each port's certificate expiry is a gauge, so an alert can fire before a
// renewal that did not happen becomes an outage.
func (s *Config) serverTLS(logger *slog.Logger, reg prometheus.Registerer) (grpcTLS, httpTLS *tls.Config, err error) {
	if !s.TLS.Enabled() {
		// Validation allowed it: on loopback, or with --allow-plaintext,
		// which is worth a warning at every start.
		level := slog.LevelInfo
		if s.AllowPlaintext {
			level = slog.LevelWarn
		}
		logger.Log(context.Background(), level, "the gRPC and HTTP ports serve plaintext (set --tls-cert-file and --tls-key-file for TLS)",
			"grpc_addr", s.GRPCAddr, "http_addr", s.HTTPAddr, "allow_plaintext", s.AllowPlaintext)
		return nil, nil, nil
	}
	g, err := s.TLS.Load(logger.With("listener", "grpc"))
	if err != nil {
		return nil, nil, fmt.Errorf("tls-cert-file: %w", err)
	}
	httpSide := s.TLS
	httpSide.ClientCAFile = s.HTTPClientCAFile
	h, err := httpSide.Load(logger.With("listener", "http"))
	if err != nil {
		return nil, nil, fmt.Errorf("tls-cert-file: %w", err)
	}
	for port, certs := range map[string]*connsec.ServerCerts{"grpc": g, "http": h} {
		expiry := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "sundial_api_tls_certificate_expiry_timestamp_seconds",
			Help:        "When the certificate the port serves expires (Unix seconds); read when scraped, after a reload if its files changed.",
			ConstLabels: prometheus.Labels{"port": port},
		}, func() float64 { return float64(certs.Leaf().NotAfter.Unix()) })
		if err := reg.Register(expiry); err != nil {
			return nil, nil, fmt.Errorf("tls: %w", err)
		}
	}
	leaf := g.Leaf()
	logger.Info("tls on the gRPC and HTTP ports", "subject", leaf.Subject.String(), "dns_names", leaf.DNSNames,
		"not_after", leaf.NotAfter.UTC().Format(time.RFC3339), "grpc_client_certificates", g.MutualTLS(),
		"http_client_certificates", h.MutualTLS(), "min_version", cmp.Or(s.TLS.MinVersion, "1.2"))
	return g.Config("h2"), h.Config("h2", "http/1.1"), nil
}
