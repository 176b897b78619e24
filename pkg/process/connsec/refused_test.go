package connsec_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sundialhq/sundial/pkg/process/connsec"
	"github.com/sundialhq/sundial/testkit/tlstest"
)

func TestRefusedKeepsTheMessageAndTheCause(t *testing.T) {
	cause := errors.New("WRONGPASS invalid username-password pair")
	err := fmt.Errorf("redis at 127.0.0.1:6380: %w", connsec.Refused(cause))
	require.Equal(t, "redis at 127.0.0.1:6380: WRONGPASS invalid username-password pair", err.Error())
	require.ErrorIs(t, err, connsec.ErrRefused)
	require.ErrorIs(t, err, cause)
	require.NoError(t, connsec.Refused(nil))
	require.NotErrorIs(t, fmt.Errorf("x: %w", cause), connsec.ErrRefused)
}

// Real handshakes: what the server presents or answers is a refusal; a
// port nobody listens on, or a server that never answers, is not.
func TestIsTLSRefusal(t *testing.T) {
	ca := tlstest.NewCA(t, "trusted")
	addr := serveTLS(t, &tls.Config{Certificates: []tls.Certificate{ca.Server("server").Pair}})
	dial := func(cfg *tls.Config, addr string) error {
		d := &net.Dialer{Timeout: 2 * time.Second}
		c, err := tls.DialWithDialer(d, "tcp", addr, cfg)
		if err == nil {
			_ = c.Close()
		}
		return err
	}
	require.NoError(t, dial(&tls.Config{RootCAs: ca.Pool()}, addr))

	other := tlstest.NewCA(t, "other")
	require.True(t, connsec.IsTLSRefusal(dial(&tls.Config{RootCAs: other.Pool()}, addr)), "an untrusted certificate")
	require.True(t, connsec.IsTLSRefusal(dial(&tls.Config{RootCAs: ca.Pool(), ServerName: "elsewhere"}, addr)), "another name")

	// A plaintext server's answer is not TLS.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		_, _ = c.Write([]byte("-ERR unknown command\r\n"))
		_ = c.Close()
	}()
	require.True(t, connsec.IsTLSRefusal(dial(&tls.Config{RootCAs: ca.Pool()}, ln.Addr().String())), "a plaintext reply")
	_ = ln.Close()
	<-done

	closed := ln.Addr().String() // nobody listens there any more
	require.False(t, connsec.IsTLSRefusal(dial(&tls.Config{RootCAs: ca.Pool()}, closed)), "a refused connection is a network failure")
	require.False(t, connsec.IsTLSRefusal(errors.New("i/o timeout")))
	require.False(t, connsec.IsTLSRefusal(nil))
}

func TestAtStartStopsOnARefusalOnly(t *testing.T) {
	var logged bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logged, nil))
	ctx := context.Background()

	refusal := fmt.Errorf("redis at 127.0.0.1:6380: %w", connsec.Refused(errors.New("WRONGPASS")))
	require.ErrorIs(t, connsec.AtStart(ctx, logger, func(context.Context) error { return refusal }), refusal)
	require.Empty(t, logged.String())

	down := errors.New("redis at 127.0.0.1:6380: dial tcp: connection refused")
	require.NoError(t, connsec.AtStart(ctx, logger, func(context.Context) error { return down }))
	require.Contains(t, logged.String(), "connection refused")

	var deadline time.Time
	require.NoError(t, connsec.AtStart(ctx, logger, func(ctx context.Context) error {
		deadline, _ = ctx.Deadline()
		return nil
	}))
	require.WithinDuration(t, time.Now().Add(connsec.StartupTimeout), deadline, time.Second, "the check is bounded")
}
