package checkpoint

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestRetrier(t *testing.T) {
	r := retrier{attempts: 4, base: time.Millisecond, max: 4 * time.Millisecond, timeout: 50 * time.Millisecond}
	ctx := context.Background()
	boom := errors.New("boom")

	calls := 0
	err := r.do(ctx, func(context.Context) error { calls++; return transient(boom) })
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, boom) || calls != 4 {
		t.Fatalf("transient: %v after %d calls, want ErrUnavailable after 4", err, calls)
	}

	calls = 0
	err = r.do(ctx, func(context.Context) error {
		calls++
		if calls < 3 {
			return transient(boom)
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("recovering: %v after %d calls", err, calls)
	}

	calls = 0
	err = r.do(ctx, func(context.Context) error { calls++; return errExists })
	if !errors.Is(err, errExists) || calls != 1 {
		t.Fatalf("permanent: %v after %d calls, want 1", err, calls)
	}

	// A slow attempt times out and is retried; the caller's context is not.
	calls = 0
	err = r.do(ctx, func(actx context.Context) error {
		calls++
		<-actx.Done()
		return actx.Err()
	})
	if !errors.Is(err, ErrUnavailable) || calls != 4 {
		t.Fatalf("attempt timeouts: %v after %d calls", err, calls)
	}

	cctx, cancel := context.WithCancel(ctx)
	calls = 0
	err = r.do(cctx, func(context.Context) error { calls++; cancel(); return transient(boom) })
	if !errors.Is(err, context.Canceled) || calls != 1 {
		t.Fatalf("cancelled: %v after %d calls", err, calls)
	}

	for attempt := 1; attempt < 40; attempt++ {
		if d := r.backoff(attempt); d < 0 || d > r.max {
			t.Fatalf("backoff(%d) = %s outside [0, %s]", attempt, d, r.max)
		}
	}
}
