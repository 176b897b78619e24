package connsec

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"strings"
	"time"
)

// ErrRefused marks a startup check's error as the component refusing the
// service's settings — a wrong password, a server certificate the CA
// bundle does not cover, TLS against a plaintext port — rather than not
// answering. Retrying cannot mend it, so a service stops at start on it
// (naming the component), where a component that is merely down is waited
// for as before. Test with errors.Is.
var ErrRefused = errors.New("refused by the component")

// Refused marks err with ErrRefused, keeping its message; nil stays nil.
func Refused(err error) error {
	if err == nil {
		return nil
	}
	return refusal{err}
}

type refusal struct{ err error }

func (r refusal) Error() string   { return r.err.Error() }
func (r refusal) Unwrap() []error { return []error{r.err, ErrRefused} }

// IsTLSRefusal reports whether err is a TLS handshake that failed on what
// the peers presented — a certificate not trusted, for another name or
// expired, an alert from the server (it wants a client certificate, say),
// or a reply that is not TLS at all — as opposed to a network failure.
func IsTLSRefusal(err error) bool {
	var (
		unknownCA  x509.UnknownAuthorityError
		hostname   x509.HostnameError
		invalid    x509.CertificateInvalidError
		verify     *tls.CertificateVerificationError
		alert      tls.AlertError
		notTLS     tls.RecordHeaderError
		pointerCA  *x509.UnknownAuthorityError
		pointerHst *x509.HostnameError
	)
	if errors.As(err, &unknownCA) || errors.As(err, &hostname) || errors.As(err, &invalid) ||
		errors.As(err, &verify) || errors.As(err, &alert) || errors.As(err, &notTLS) ||
		errors.As(err, &pointerCA) || errors.As(err, &pointerHst) {
		return true
	}
	// An alert the server sent has no exported type (crypto/tls's alert);
	// its text is fixed: "remote error: tls: <alert>".
	return err != nil && strings.Contains(err.Error(), "remote error: tls: ")
}

// StartupTimeout bounds a service's startup check of one component.
const StartupTimeout = 10 * time.Second

// AtStart runs a component's startup check (lease.Check, kafkaconn.Check,
// leader.Check), bounded by StartupTimeout. A refusal (ErrRefused) is
// returned, for the service to stop on with the check's error, which names
// the component; any other failure — the component not answering yet — is
// logged as a warning and nil returned, so the service starts and waits for
// the component as it did without the check.
func AtStart(ctx context.Context, logger *slog.Logger, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, StartupTimeout)
	defer cancel()
	err := check(ctx)
	if err == nil || errors.Is(err, ErrRefused) {
		return err
	}
	logger.Warn("component not reachable at start; starting anyway and waiting for it", "err", err)
	return nil
}
