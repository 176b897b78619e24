package firing

import (
	"net/url"
	"strings"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// TargetHost is where a target sends its firings, as one short key: for
// an HTTP target the URL's host and its port when the URL names one
// ("hooks.example:8443", "[::1]:8080"), lower-cased, since host names are
// not case-sensitive and "API.example" and "api.example" are one server;
// for a Kafka target "kafka " and its topic ("kafka orders", the topic as
// written: topics are case-sensitive). "" when the target is neither or
// its URL does not parse.
//
// It is the one derivation of a target's host: the worker keys its
// per-host rate limits and circuit breakers on the HTTP hosts, stores it
// with every dead letter (dead_letters.target_host), and the console
// groups dead letters by it.
func TargetHost(t *sundialv1.Target) string {
	if k := t.GetKafka(); k != nil {
		return "kafka " + k.GetTopic()
	}
	h := t.GetHttp()
	if h == nil {
		return ""
	}
	u, err := url.Parse(h.GetUrl())
	if err != nil {
		return ""
	}
	return strings.ToLower(u.Host)
}
