// Package errmark marks an error as a sentinel's without adding to its
// words, as cockroachdb/errors' Mark and pebble's MarkCorruptionError do:
// for an error that says itself what is wrong and what to do, where a
// "sentinel: " prefix would only repeat it.
//
// Cost: one allocation per mark.
package errmark

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
