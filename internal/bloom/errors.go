package bloom

import (
	"errors"
	"fmt"

	"github.com/bloomgate/bloomgate/internal/errmark"
)

// Sentinel errors of the decoder; a *FormatError wraps one of them.
var (
	// ErrCorrupt: the data fails a checksum, is truncated or inconsistent.
	// It is errmark.ErrCorrupt in the filter's words.
	ErrCorrupt = errmark.Corrupt("corrupt generation data")
	// ErrUnsupportedVersion: the magic matches but the format version is unknown.
	ErrUnsupportedVersion = errors.New("unsupported generation format version")
	// ErrTooLarge: the declared size exceeds the caller's or the package's limit.
	ErrTooLarge = errors.New("generation too large")
)

// FormatError describes why a generation object was rejected.
type FormatError struct {
	Section string // "header", "chunk", "trailer"
	Offset  int64  // byte offset in the stream where the problem was found
	Detail  string
	Err     error // ErrCorrupt, ErrUnsupportedVersion or ErrTooLarge
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("decoding generation: %s at byte %d: %s: %v", e.Section, e.Offset, e.Detail, e.Err)
}

func (e *FormatError) Unwrap() error { return e.Err }
