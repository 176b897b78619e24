package secrets_test

import (
	"fmt"

	"github.com/sundialhq/sundial/pkg/secrets"
)

// A worker resolves a header template from its environment; what it logs is
// redacted.
func Example() {
	env := secrets.EnvFromEnviron([]string{"SUNDIAL_SECRET_BILLING_TOKEN=tok-8f3a2c"})
	r := secrets.NewResolver(nil, 0, env)
	header, used, err := r.Expand("Bearer {{secret:billing-token}}")
	if err != nil {
		panic(err)
	}
	fmt.Println(header)
	fmt.Println(secrets.Redact("target echoed: "+header, used))
	_, _, err = r.Expand("{{secret:missing}}")
	fmt.Println(err)
	// Output:
	// Bearer tok-8f3a2c
	// target echoed: Bearer [REDACTED]
	// secrets: secret "missing" not found (no file in --secrets-dir, no SUNDIAL_SECRET_MISSING)
}
