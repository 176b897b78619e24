package jobspec

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestValidateSecretReferences(t *testing.T) {
	good := []string{
		"Bearer {{secret:billing_token}}",
		"{{secret:a}}",
		"{{secret:A.b-c_9}}:{{secret:other}}",
		"no reference at all",
		"a single { brace and a } are fine",
		"}} alone is fine",
	}
	for _, v := range good {
		j := goodJob()
		httpTarget(j).Headers = map[string]string{"Authorization": v}
		if err := Validate(j); err != nil {
			t.Errorf("%q refused: %v", v, err)
		}
	}
	bad := []string{
		"{{secret:}}",
		"{{secret:has space}}",
		"{{secret:slash/no}}",
		"{{ secret:x }}",
		"{{SECRET:x}}",
		"{{env:HOME}}",
		"Bearer {{secret:unterminated",
		"{{secret:ok}} then {{",
		"{{secret:" + strings.Repeat("x", MaxSecretName+1) + "}}",
	}
	for _, v := range bad {
		j := goodJob()
		httpTarget(j).Headers = map[string]string{"Authorization": v}
		var jerr *Error
		if !errors.As(Validate(j), &jerr) || len(jerr.Violations) != 1 {
			t.Errorf("%q accepted or wrongly refused: %v", v, Validate(j))
			continue
		}
		got := jerr.Violations[0]
		if got.Field != `target.http.headers["Authorization"]` || !strings.Contains(got.Description, "malformed secret reference") {
			t.Errorf("%q: %+v", v, got)
		}
		// Never echo the value: it may hold a secret.
		if len(v) > 12 && strings.Contains(got.Description, v) {
			t.Errorf("%q: the message quotes the value: %s", v, got.Description)
		}
	}
}

func TestSecretReferencesAndExpand(t *testing.T) {
	names, err := SecretReferences("{{secret:a}}-{{secret:b.c}}-{{secret:a}}")
	if err != nil || !slices.Equal(names, []string{"a", "b.c", "a"}) {
		t.Fatalf("SecretReferences = %v, %v", names, err)
	}
	secrets := map[string]string{"a": "AAA", "b.c": "{{secret:a}}"}
	lookup := func(n string) (string, bool) { v, ok := secrets[n]; return v, ok }
	got, err := ExpandSecrets("x {{secret:a}} y {{secret:b.c}} z", lookup)
	// A secret's value is inserted verbatim, never expanded again.
	if err != nil || got != "x AAA y {{secret:a}} z" {
		t.Fatalf("ExpandSecrets = %q, %v", got, err)
	}
	if got, err := ExpandSecrets("plain", lookup); err != nil || got != "plain" {
		t.Fatalf("plain = %q, %v", got, err)
	}
	if _, err := ExpandSecrets("{{secret:missing}}", lookup); !errors.Is(err, ErrUnknownSecret) || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("missing secret: %v", err)
	}
	if _, err := ExpandSecrets("{{oops}}", lookup); !errors.Is(err, ErrMalformedSecretRef) {
		t.Fatalf("malformed: %v", err)
	}
	j := goodJob()
	httpTarget(j).Headers = map[string]string{"A": "{{secret:z}}", "B": "{{secret:a}} {{secret:z}}", "C": "plain"}
	if got := SecretNames(j); !slices.Equal(got, []string{"a", "z"}) {
		t.Fatalf("SecretNames = %v", got)
	}
}
