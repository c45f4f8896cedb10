package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/bloomgate/bloomgate/internal/backoff"
)

// retrier runs one storage request with a per-attempt timeout and retries
// transient failures with exponential backoff and full jitter. It never
// retries once the caller's context has ended, nor permanent errors
// (not found, create-only conflict, bad credentials, ...).
type retrier struct {
	attempts int
	base     time.Duration
	max      time.Duration
	timeout  time.Duration // per attempt; 0 = none
}

// ErrUnavailable wraps the last error of a storage request that still
// failed after all retries (server down, 5xx, timeouts): the data may be
// fine, the store is not reachable now.
var ErrUnavailable = errors.New("checkpoint store unavailable")

func (r retrier) do(ctx context.Context, fn func(ctx context.Context) error) error {
	var err error
	for attempt := 1; ; attempt++ {
		err = r.once(ctx, fn)
		if err == nil || !isTransient(err) {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if attempt >= r.attempts {
			return fmt.Errorf("%w: after %d attempts: %w", ErrUnavailable, attempt, err)
		}
		if err := sleep(ctx, r.backoff(attempt)); err != nil {
			return err
		}
	}
}

func (r retrier) once(ctx context.Context, fn func(ctx context.Context) error) error {
	actx := ctx
	if r.timeout > 0 {
		var cancel context.CancelFunc
		actx, cancel = context.WithTimeout(ctx, r.timeout)
		defer cancel()
	}
	err := fn(actx)
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		// The caller gave up: report that, not the request's symptom.
		return ctx.Err()
	}
	if actx.Err() != nil && !isTransient(err) {
		return transient(fmt.Errorf("attempt timed out after %s: %w", r.timeout, err))
	}
	return err
}

// backoff returns a random delay in [0, min(max, base·2^(attempt-1))]
// ("full jitter"), so that writers failing together do not retry together.
func (r retrier) backoff(attempt int) time.Duration {
	d := r.base << min(attempt-1, 30)
	if d <= 0 || d > r.max {
		d = r.max
	}
	return time.Duration(rand.Int64N(int64(d) + 1))
}

func sleep(ctx context.Context, d time.Duration) error {
	if !backoff.Sleep(ctx, d) {
		return ctx.Err()
	}
	return nil
}
