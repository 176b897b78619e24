package leader

import (
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"
)

// zkAuthenticatedFormat is the format string go-zookeeper/zk logs after a
// session handshake, with the session id and the timeout the server
// negotiated (in ms). The client keeps that timeout unexported, and the
// server clamps the requested one to [minSessionTimeout, maxSessionTimeout],
// so this log call is the only way to learn it. The integration tests fail
// if a client upgrade changes the format (negotiatedTimeout stays zero).
const zkAuthenticatedFormat = "authenticated: id=%d, timeout=%d"

// zkLogger routes the client's log lines to slog at debug level (they are
// chatty: every reconnect logs several) and captures the negotiated
// session timeout.
type zkLogger struct {
	logger     *slog.Logger
	negotiated atomic.Int64 // nanoseconds; 0 until the first handshake
}

func (l *zkLogger) Printf(format string, args ...any) {
	if format == zkAuthenticatedFormat && len(args) == 2 {
		if ms, ok := asInt64(args[1]); ok && ms > 0 {
			l.negotiated.Store(int64(time.Duration(ms) * time.Millisecond))
		}
	}
	l.logger.Debug("zookeeper client", "msg", fmt.Sprintf(format, args...))
}

func asInt64(v any) (int64, bool) {
	switch n := v.(type) {
	case int32:
		return int64(n), true
	case int64:
		return n, true
	case int:
		return int64(n), true
	}
	return 0, false
}

// effectiveTimeout is the session timeout to trust: the smaller of what
// was asked for and what the server granted. A server that granted more
// keeps our node longer than we assume (harmless); one that granted less
// would expire it while we still trusted it.
func effectiveTimeout(requested, negotiated time.Duration) time.Duration {
	if negotiated > 0 && negotiated < requested {
		return negotiated
	}
	return requested
}

// SessionLogger is the elector's ZooKeeper client logger, for other users
// of a ZooKeeper session that must know how long the server keeps it
// (pkg/rangeleader's trust window): it logs the client at debug level and
// captures the negotiated session timeout. Pass it to zk.WithLogger.
type SessionLogger struct{ zl zkLogger }

// NewSessionLogger returns a logger writing to log.
func NewSessionLogger(log *slog.Logger) *SessionLogger {
	return &SessionLogger{zl: zkLogger{logger: log}}
}

// Printf implements zk.Logger.
func (l *SessionLogger) Printf(format string, args ...any) { l.zl.Printf(format, args...) }

// Timeout is the session timeout to trust: the smaller of requested and
// what the server negotiated at the last handshake.
func (l *SessionLogger) Timeout(requested time.Duration) time.Duration {
	return effectiveTimeout(requested, time.Duration(l.zl.negotiated.Load()))
}
