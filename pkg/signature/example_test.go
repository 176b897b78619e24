package signature_test

import (
	"fmt"
	"time"

	"github.com/sundialhq/sundial/pkg/signature"
)

// A target checks the Sundial-Signature header of a request it received,
// allowing five minutes of clock difference.
func Example() {
	secret := []byte("shared-with-the-target")
	sent := time.Unix(1767258000, 0)
	body := []byte(`{"report":"daily"}`)
	header := signature.Sign(secret, sent, "0b8a1c4e-6f2d-5a33-9d1e-2c4b5a6d7e8f", body)
	fmt.Println(header[:13])

	// On the target, with the execution id from Sundial-Execution-Id:
	err := signature.Verify(secret, header, "0b8a1c4e-6f2d-5a33-9d1e-2c4b5a6d7e8f", body, sent.Add(2*time.Second), 5*time.Minute)
	fmt.Println(err)

	err = signature.Verify(secret, header, "0b8a1c4e-6f2d-5a33-9d1e-2c4b5a6d7e8f", []byte(`{"report":"weekly"}`), sent, 5*time.Minute)
	fmt.Println(err)
	// Output:
	// t=1767258000,
	// <nil>
	// signature: mismatch
}
