package connsec_test

import (
	"flag"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/sundialhq/sundial/pkg/process/config"
	"github.com/sundialhq/sundial/pkg/store/lease"
)

// A service registers the settings of the components it uses, loads them
// with its other flags, validates them, and applies them to its clients.
// In Kubernetes the password comes from a Secret (SUNDIAL_REDIS_PASSWORD as
// a secretKeyRef, or a mounted file named by --redis-password-file).
func Example() {
	var sec lease.Security
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	sec.Register(fs)
	env := map[string]string{
		"SUNDIAL_REDIS_USERNAME": "sundial",
		"SUNDIAL_REDIS_PASSWORD": "s3cret",
		"SUNDIAL_REDIS_TLS":      "true",
	}
	if err := config.Load(fs, nil, func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		panic(err)
	}
	var p config.Problems
	sec.Validate(&p)
	if err := p.Err(); err != nil {
		panic(err)
	}
	o := redis.Options{Addr: "redis.cache.svc:6380"}
	if err := sec.Apply(&o); err != nil {
		panic(err)
	}
	fmt.Println(o.Username, o.TLSConfig != nil)
	fmt.Println(sec.Password.Value) // what a log line would show
	// Output:
	// sundial true
	// [redacted]
}
