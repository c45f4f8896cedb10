package worker

import (
	"context"
	"time"
)

// backoff is the wait between retries of one failing operation: it doubles
// from first up to most, and a success resets it.
type backoff struct{ first, most, next time.Duration }

func newBackoff(first, most time.Duration) *backoff {
	return &backoff{first: first, most: most, next: first}
}

// delay is the wait the next call of wait takes.
func (b *backoff) delay() time.Duration { return b.next }

// wait sleeps for the current delay, at most limit (0: no limit), and
// doubles the delay. It returns false if ctx ended first.
func (b *backoff) wait(ctx context.Context, limit time.Duration) bool {
	d := b.next
	if limit > 0 {
		d = min(d, limit)
	}
	b.next = min(2*b.next, b.most)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// reset starts the next failure's waits from the first delay again.
func (b *backoff) reset() { b.next = b.first }
