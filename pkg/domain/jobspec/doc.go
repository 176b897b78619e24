// Package jobspec is the one place that knows what a valid Sundial job is and
// what its unset fields mean.
//
// The api validates every job it accepts with Validate and fills its defaults
// with Normalize before storing it; the prefetcher and the api build the
// engine schedule of a stored job with Schedule. A job's firings are built
// by pkg/domain/firing (firing.New), which declares the defaults a firing carries;
// the constants here are the same values.
//
// Validation collects every problem rather than stopping at the first, and
// names each by its field path inside the job (schedule.cron,
// target.http.url, retry.max_delay), so a caller can fix a bad job in one
// round trip. The api turns an *Error into a gRPC InvalidArgument status with
// google.rpc.BadRequest field violations.
//
// URLs: CheckURL is the rule for every URL a job names (target, cancel and
// callback URLs): RFC 3986, written exactly as it will be sent. Validate
// applies it, and the worker applies it again before a request, so a job
// stored before the rule is dead-lettered with its reason instead of being
// sent.
//
// Secrets: an HTTP target's header values may reference secrets as
// {{secret:NAME}} (secrets.go). Validate accepts well-formed references and
// refuses malformed ones (naming the header, never quoting its value); the
// api stores the reference, and the worker resolves it with ExpandSecrets
// from its own secret source just before the request.
//
// Defaults (applied by Normalize, and assumed by firing.New for jobs stored
// before a default existed):
//
//	priority          MEDIUM
//	attempt_timeout   30s
//	retry             max_attempts 1 (no retry), EXPONENTIAL, initial 1s, max 1m
//	misfire           RUN_ONCE, grace 1h, max_catch_up 10
//	overlap           ALLOW
//	schedule          timezone UTC, dst_gap SHIFT, dst_repeat FIRST
//	target.http       method POST
package jobspec
