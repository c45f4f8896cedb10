package errmark

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"
)

func TestMark(t *testing.T) {
	sentinel := errors.New("sentinel")
	inner := fmt.Errorf("opening settings: %w", fs.ErrNotExist)
	err := Mark(inner, sentinel)
	if err.Error() != inner.Error() {
		t.Errorf("message %q, want err's %q", err, inner)
	}
	if !errors.Is(err, sentinel) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("errors.Is misses the sentinel or what err wraps: %v", err)
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		t.Errorf("errors.As found a %T the error does not hold", pe)
	}
	if Mark(nil, sentinel) != nil {
		t.Error("marking nil gave an error")
	}
}
