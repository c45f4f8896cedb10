package group

import (
	"log/slog"
	"sync"
	"time"
)

// RetryLog reports a request that keeps failing while brokers are away
// (offset commits, joins) without a line per attempt: the first failure
// at WARN, then a summary at WARN after RetrySummaryFirst and at doubling
// intervals up to RetrySummaryMax ("still failing" with how long, the
// number of attempts and the last error), every other attempt at DEBUG,
// and one INFO when a request succeeds again. Metrics and the status page
// show the state all along; only the log is thinned. Safe for concurrent
// use.
type RetryLog struct {
	Log *slog.Logger
	// What names the request in the lines: "offset commit" gives
	// "offset commit failed; retrying".
	What string
	// Now is the clock (nil: time.Now).
	Now func() time.Time

	mu       sync.Mutex
	since    time.Time // first failure of the current run; zero: not failing
	next     time.Time // when the next summary is due
	every    time.Duration
	attempts int
	last     error // the last failure of the current run
}

// Summaries of a run of failures: the first after RetrySummaryFirst, then
// at doubling intervals up to RetrySummaryMax (8 minutes of failures once
// a second give 5 lines, not 480).
const (
	RetrySummaryFirst = 30 * time.Second
	RetrySummaryMax   = 5 * time.Minute
)

func (r *RetryLog) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// Failed records a failed attempt with err; attrs are added to the line.
func (r *RetryLog) Failed(err error, attrs ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	r.attempts++
	r.last = err
	if r.since.IsZero() {
		r.since, r.every, r.attempts = now, RetrySummaryFirst, 1
		r.next = now.Add(r.every)
		r.Log.Warn(r.What+" failed; retrying", append([]any{"err", err}, attrs...)...)
		return
	}
	if now.Before(r.next) {
		r.Log.Debug(r.What+" failed again; retrying", append([]any{"err", err}, attrs...)...)
		return
	}
	r.every = min(2*r.every, RetrySummaryMax)
	r.next = now.Add(r.every)
	r.Log.Warn(r.What+" still failing; retrying", append([]any{"for", now.Sub(r.since).Round(time.Second), "attempts", r.attempts,
		"last_err", err, "next_summary_in", r.every}, attrs...)...)
}

// Succeeded ends a run of failures, if any, with one INFO line.
func (r *RetryLog) Succeeded() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.since.IsZero() {
		return
	}
	r.Log.Info(r.What+" succeeded again", "after", r.now().Sub(r.since).Round(time.Second), "failed_attempts", r.attempts)
	r.since, r.attempts, r.last = time.Time{}, 0, nil
}

// Failing reports whether the last attempt failed.
func (r *RetryLog) Failing() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.since.IsZero()
}

// LastError returns the last failure of the current run of failures (nil:
// the last attempt succeeded, or none failed).
func (r *RetryLog) LastError() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}
