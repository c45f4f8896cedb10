package worker

import (
	"errors"
	"fmt"
	"strings"

	"github.com/segmentio/kafka-go"
)

// writeErrors is a kafka.WriteErrors summarized for logs: kafka-go reports
// one error per message, so a failed batch of thousands repeats the same
// broker error thousands of times. It keeps the original for errors.As/Is.
type writeErrors struct {
	orig     kafka.WriteErrors
	distinct []error // one of each distinct error, so errors.Is reaches them
	summary  string
}

func (e *writeErrors) Error() string { return e.summary }
func (e *writeErrors) Unwrap() []error {
	return append([]error{e.orig}, e.distinct...)
}

// summarizeWriteErrors replaces a kafka.WriteErrors by a short form that
// lists each distinct error once with its count; other errors pass as they are.
func summarizeWriteErrors(err error) error {
	var we kafka.WriteErrors
	if !errors.As(err, &we) {
		return err
	}
	var order []string
	var distinct []error
	counts := map[string]int{}
	failed := 0
	for _, e := range we {
		if e == nil {
			continue
		}
		failed++
		msg := e.Error()
		if counts[msg] == 0 {
			order = append(order, msg)
			distinct = append(distinct, e)
		}
		counts[msg]++
	}
	const maxDistinct = 3
	var b strings.Builder
	fmt.Fprintf(&b, "%d of %d messages failed: ", failed, len(we))
	for i, msg := range order {
		if i == maxDistinct {
			fmt.Fprintf(&b, "; and %d other distinct errors", len(order)-maxDistinct)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%d× %s", counts[msg], msg)
	}
	return &writeErrors{orig: we, distinct: distinct, summary: b.String()}
}
