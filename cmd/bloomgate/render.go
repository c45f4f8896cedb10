package main

import (
	"fmt"
	"io"
)

// Helpers for the commands' text output (inspect's report, dev's summary).

// byteSize writes a byte count for people: exact below 1 KiB ("512 B"),
// else one decimal in the largest binary unit it reaches ("44.0 KiB",
// "1.5 TiB"). Just below a unit it reads "1024.0 KiB": the unit is chosen
// before rounding.
func byteSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

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
