package signature_test

import (
	"fmt"
	"time"

	"github.com/sundialhq/sundial/pkg/domain/signature"
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

// A tenant's target during a rotation: the request carries a signature by
// each valid key, named; the target verifies with whichever key it holds.
func ExampleVerifyKeys() {
	sent := time.Unix(1767258000, 0)
	body := []byte(`{"report":"daily"}`)
	const exec = "0b8a1c4e-6f2d-5a33-9d1e-2c4b5a6d7e8f"
	current := signature.Key{ID: "k20261126-77b0e4d2", Secret: []byte("sdk_new")}
	previous := signature.Key{ID: "k20261001-3f9a1c07", Secret: []byte("sdk_old")}
	header := signature.SignKeys([]signature.Key{current, previous}, sent, exec, body)

	// A target still on the previous key, and one already on the current.
	fmt.Println(signature.VerifyKeys([]signature.Key{previous}, header, exec, body, sent, 5*time.Minute))
	fmt.Println(signature.VerifyKeys([]signature.Key{current}, header, exec, body, sent, 5*time.Minute))
	// Another tenant's key is not named by the header.
	other := signature.Key{ID: "k20261126-0000beef", Secret: []byte("sdk_other")}
	fmt.Println(signature.VerifyKeys([]signature.Key{other}, header, exec, body, sent, 5*time.Minute))
	// Output:
	// <nil>
	// <nil>
	// signature: no signature by a key the verifier holds
}
