package errmark_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/bloomgate/bloomgate/internal/bloom"
	"github.com/bloomgate/bloomgate/internal/checkpoint"
	"github.com/bloomgate/bloomgate/internal/errmark"
	"github.com/bloomgate/bloomgate/internal/exact"
)

// TestOneCorrupt: the filter's, the checkpoint's and the exact store's
// corrupt-data errors are the one sentinel errmark.ErrCorrupt, each in its
// own words, and stay apart from one another.
func TestOneCorrupt(t *testing.T) {
	words := []struct {
		err  error
		want string
	}{
		{bloom.ErrCorrupt, "corrupt generation data"},
		{checkpoint.ErrCorrupt, "checkpoint data corrupt"},
		{exact.ErrCorrupt, "exact store: corrupt checkpoint"},
	}
	for i, w := range words {
		wrapped := fmt.Errorf("restoring partition 3: %w", &bloom.FormatError{Section: "chunk", Err: w.err})
		if w.err.Error() != w.want {
			t.Errorf("message %q, want %q", w.err, w.want)
		}
		if !errors.Is(wrapped, errmark.ErrCorrupt) || !errors.Is(wrapped, w.err) {
			t.Errorf("%q wrapped: errors.Is misses errmark.ErrCorrupt or its own sentinel", w.want)
		}
		for j, other := range words {
			if i != j && errors.Is(w.err, other.err) {
				t.Errorf("%q is %q", w.want, other.want)
			}
		}
	}
	if errors.Is(errors.New("corrupt generation data"), errmark.ErrCorrupt) {
		t.Error("an unmarked error with the same words is errmark.ErrCorrupt")
	}
}
