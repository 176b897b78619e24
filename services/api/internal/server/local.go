package server

import (
	"context"
	"errors"
	"net"
	"sync"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// localListener is an in-process listener: DialLocal hands its Accept one
// end of a net.Pipe. The HTTP/JSON gateway and the console reach the gRPC
// server through it, so their calls take the same interceptors as a
// network call (tokens, tenancy, rate limit, metrics, tracing) without
// leaving the process: no loopback port that a local user could reach
// around TLS or client certificates, and no certificate the gateway would
// need to present to its own server.
type localListener struct {
	conns     chan net.Conn
	closed    chan struct{}
	closeOnce sync.Once
}

func newLocalListener() *localListener {
	return &localListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

// errLocalClosed is returned by Accept and dial once the listener is
// closed (the server stopped).
var errLocalClosed = errors.New("server: the in-process listener is closed")

func (l *localListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, errLocalClosed
	}
}

func (l *localListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return nil
}

func (l *localListener) Addr() net.Addr { return localAddr{} }

// dial returns the client end of a new connection once Accept took the
// server end.
func (l *localListener) dial(ctx context.Context) (net.Conn, error) {
	server, client := net.Pipe()
	select {
	case l.conns <- localConn{server}:
		return client, nil
	case <-l.closed:
	case <-ctx.Done():
	}
	_ = server.Close()
	_ = client.Close()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return nil, errLocalClosed
}

type localAddr struct{}

func (localAddr) Network() string { return "local" }
func (localAddr) String() string  { return "in-process" }

// localConn marks the server end of an in-process connection, for
// listenerCredentials.
type localConn struct{ net.Conn }

// listenerCredentials is TLS for connections from the network and no
// handshake for in-process ones, which never leave the process: one gRPC
// server, one set of services and interceptors, two ways in.
type listenerCredentials struct {
	credentials.TransportCredentials // the network's (TLS)
	local                            credentials.TransportCredentials
}

func newListenerCredentials(network credentials.TransportCredentials) credentials.TransportCredentials {
	return listenerCredentials{TransportCredentials: network, local: insecure.NewCredentials()}
}

func (c listenerCredentials) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	if _, ok := conn.(localConn); ok {
		return c.local.ServerHandshake(conn)
	}
	return c.TransportCredentials.ServerHandshake(conn)
}

func (c listenerCredentials) Clone() credentials.TransportCredentials {
	return listenerCredentials{TransportCredentials: c.TransportCredentials.Clone(), local: c.local.Clone()}
}
