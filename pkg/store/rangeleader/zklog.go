package rangeleader

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

// trustDeadline is how long a member may act on a confirmation of its
// session sent at confirmed: the server expires a session timeout after it
// last heard from the client, and it heard the confirming request no
// earlier than it was sent, so the session (and its nodes) cannot have been
// expired before confirmed+timeout. The margin absorbs timer lateness, GC
// pauses and clock-rate differences between the two machines.
func trustDeadline(confirmed time.Time, timeout, margin time.Duration) time.Time {
	return confirmed.Add(timeout - margin)
}
