package console

import (
	"strings"
	"testing"

	sundialv1 "github.com/sundialhq/sundial/proto/sundial/v1"
)

// The form offers every overlap policy the api knows, each by a word the
// form reads back.
func TestFormOffersEveryOverlapPolicy(t *testing.T) {
	offered := map[string]bool{}
	for _, w := range overlaps {
		if _, ok := sundialv1.OverlapPolicy_value["OVERLAP_POLICY_"+strings.ToUpper(w)]; !ok {
			t.Errorf("offered %q is no policy", w)
		}
		offered[w] = true
	}
	for name, n := range sundialv1.OverlapPolicy_value {
		if w := strings.ToLower(strings.TrimPrefix(name, "OVERLAP_POLICY_")); n != 0 && !offered[w] {
			t.Errorf("policy %s is not offered", name)
		}
	}
}
