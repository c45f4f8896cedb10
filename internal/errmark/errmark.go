// Package errmark marks an error as a sentinel's without adding to its
// words, as cockroachdb/errors' Mark and pebble's MarkCorruptionError do:
// for an error that says itself what is wrong and what to do, where a
// "sentinel: " prefix would only repeat it.
//
// Cost: one allocation per mark.
package errmark

import "errors"

// ErrCorrupt is the one sentinel of stored data that fails its integrity
// checks (a checksum, a length, a format, a reference): a filter
// generation or log segment (bloom), a checkpoint manifest or object
// (checkpoint), an exact store's files (exact). Each of those packages
// names it in its own words (Corrupt), and errors.Is(err, ErrCorrupt)
// finds them all: whichever package found the fault, a corrupt checkpoint
// means falling back to an older one.
var ErrCorrupt = errors.New("corrupt data")

// Corrupt returns a sentinel with words of its own that errors.Is finds to
// be ErrCorrupt.
func Corrupt(words string) error { return Mark(errors.New(words), ErrCorrupt) }

// Mark returns an error with err's message that errors.Is finds to be
// sentinel as well as everything err is (nil for a nil err).
func Mark(err, sentinel error) error {
	if err == nil {
		return nil
	}
	return marked{err, sentinel}
}

type marked struct{ err, sentinel error }

func (e marked) Error() string   { return e.err.Error() }
func (e marked) Unwrap() []error { return []error{e.sentinel, e.err} }
