package netpolicy_test

import (
	"fmt"
	"net/netip"

	"github.com/sundialhq/sundial/pkg/domain/netpolicy"
)

// The default policy refuses the metadata service and loopback; an allow
// rule opens one loopback port (a local test sink) and nothing else.
func Example() {
	p, err := netpolicy.New([]string{"127.0.0.1:8099"}, nil)
	if err != nil {
		panic(err)
	}
	for _, a := range []string{"169.254.169.254:80", "127.0.0.1:8084", "127.0.0.1:8099", "10.0.0.7:443"} {
		fmt.Println(a, p.Check(netip.MustParseAddrPort(a)))
	}
	// Output:
	// 169.254.169.254:80 netpolicy: connection to 169.254.169.254:80 refused (metadata; allowlist it with --allow-target-addrs)
	// 127.0.0.1:8084 netpolicy: connection to 127.0.0.1:8084 refused (loopback; allowlist it with --allow-target-addrs)
	// 127.0.0.1:8099 <nil>
	// 10.0.0.7:443 <nil>
}
