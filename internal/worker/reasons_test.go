package worker

import (
	"slices"
	"strings"
	"testing"

	"github.com/bloomgate/bloomgate/internal/keys"
)

// TestKeyReasonsDocumented: every extraction reason has its metric series
// and is named where KeyError is documented.
func TestKeyReasonsDocumented(t *testing.T) {
	for _, r := range keys.Reasons() {
		if !slices.Contains(KeyReasons, r) {
			t.Errorf("reason %q has no metric series (KeyReasons)", r)
		}
	}
	src := strings.Join(keys.Reasons(), ", ")
	const documented = "missing, empty, malformed_json, too_large, invalid_utf8, null_key, bad_url, unsupported_type, duplicate_key_field, null_value"
	if src != documented {
		t.Errorf("keys.Reasons() = %s; KeyError's documentation lists %s: update it", src, documented)
	}
}
