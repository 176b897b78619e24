package secrets_test

import (
	"fmt"

	"github.com/sundialhq/sundial/pkg/domain/secrets"
)

// A worker resolves a header template among the secrets of the job's
// tenant; what it logs is redacted, and another tenant naming the same
// secret gets nothing.
func Example() {
	src := secrets.Map{"acme": {"billing-token": "tok-8f3a2c"}}
	r := secrets.NewResolver(nil, 0, src)
	header, used, err := r.Expand("acme", "Bearer {{secret:billing-token}}")
	if err != nil {
		panic(err)
	}
	fmt.Println(header)
	fmt.Println(secrets.Redact("target echoed: "+header, used))
	_, _, err = r.Expand("globex", "Bearer {{secret:billing-token}}")
	fmt.Println(err)
	// Output:
	// Bearer tok-8f3a2c
	// target echoed: Bearer [REDACTED]
	// secrets: tenant "globex" has no secret "billing-token" (no file globex/billing-token in --secrets-dir)
}
