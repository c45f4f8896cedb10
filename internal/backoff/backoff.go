// Package backoff is the wait between retries of one failing operation:
// it doubles from a first delay up to a bound, and a success resets it.
// The worker's partitions, the group member's join loop, the repartition
// hop and the checkpoint store's retries wait with it.
//
// Cost: a timer per wait.
package backoff

import (
	"context"
	"time"
)

// Backoff doubles a wait from first up to most. One goroutine uses it.
type Backoff struct{ first, most, next time.Duration }

// New returns a Backoff whose first wait is first, doubling up to most.
func New(first, most time.Duration) *Backoff {
	return &Backoff{first: first, most: most, next: first}
}

// Delay is the wait the next call of Wait takes.
func (b *Backoff) Delay() time.Duration { return b.next }

// Wait sleeps for the current delay, at most limit (0: no limit), and
// doubles the delay. It returns false if ctx ended first.
func (b *Backoff) Wait(ctx context.Context, limit time.Duration) bool {
	d := b.next
	if limit > 0 {
		d = min(d, limit)
	}
	b.next = min(2*b.next, b.most)
	return Sleep(ctx, d)
}

// Sleep waits for d; it returns false if ctx ended first.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Reset starts the next failure's waits from the first delay again.
func (b *Backoff) Reset() { b.next = b.first }
