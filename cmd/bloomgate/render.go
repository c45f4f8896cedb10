package main

import (
	"io"

	"github.com/bloomgate/bloomgate/internal/quantity"
)

// Helpers for the commands' text output (inspect's report, dev's summary).

// byteSize writes a byte count for people, as every output does
// (quantity.Bytes: "512 B", "44.0 KiB", "1.50 TiB").
func byteSize(n int64) string { return quantity.Bytes(uint64(max(n, 0))) }

// errWriter keeps the first write error, so formatting code stays linear.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(b []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(b)
	e.err = err
	return n, err
}
