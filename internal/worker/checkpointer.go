package worker

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// checkpointer uploads one partition's checkpoints from its own goroutine so
// that the partition only pays for the snapshot. At most one upload runs; a
// checkpoint due while one is in flight waits for the next tick.
type checkpointer struct {
	store   PartitionStore
	timeout time.Duration
	log     *slog.Logger
	now     func() time.Time
	// fence is called when the store reports that another owner claimed the
	// partition.
	fence func(error)

	jobs chan Checkpoint
	wg   sync.WaitGroup
	// base ends uploads still running when the partition stops (after
	// finish waited for them up to the shutdown deadline).
	base   context.Context
	cancel context.CancelFunc

	mu sync.Mutex
	// idled is closed when the running upload ends; nil while none runs.
	idled      chan struct{}
	lastOK     time.Time
	lastOffset int64
	lastErr    error
}

func newCheckpointer(store PartitionStore, timeout time.Duration, log *slog.Logger, now func() time.Time, fence func(error)) *checkpointer {
	base, cancel := context.WithCancel(context.Background())
	return &checkpointer{store: store, timeout: timeout, log: log, now: now, fence: fence,
		jobs: make(chan Checkpoint, 1), lastOK: now(), lastOffset: -1, base: base, cancel: cancel}
}

func (c *checkpointer) start() {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for cp := range c.jobs {
			ctx, cancel := context.WithTimeout(c.base, c.timeout)
			err := c.commit(ctx, cp)
			cancel()
			c.mu.Lock()
			close(c.idled)
			c.idled = nil
			c.mu.Unlock()
			if err != nil {
				c.log.Warn("checkpoint failed; processing continues", "offset", cp.InputOffset, "err", err)
			}
		}
	}()
}

// commit uploads cp synchronously and records the outcome.
func (c *checkpointer) commit(ctx context.Context, cp Checkpoint) error {
	start := c.now()
	err := c.store.Commit(ctx, cp)
	cp.Snapshot.Release()
	c.mu.Lock()
	if err == nil {
		c.lastOK, c.lastOffset, c.lastErr = c.now(), cp.InputOffset, nil
	} else {
		c.lastErr = err
	}
	c.mu.Unlock()
	if errors.Is(err, ErrFenced) {
		c.fence(err)
	}
	if err == nil {
		c.log.Debug("checkpoint stored", "offset", cp.InputOffset, "took", c.now().Sub(start))
	}
	return err
}

// trySubmit queues cp unless an upload is running; the caller then keeps
// ownership of the snapshot (build makes it only when accepted).
func (c *checkpointer) trySubmit(build func() Checkpoint) bool {
	c.mu.Lock()
	if c.idled != nil {
		c.mu.Unlock()
		return false
	}
	c.idled = make(chan struct{})
	c.mu.Unlock()
	c.jobs <- build()
	return true
}

// idle waits until no upload runs (or ctx ends).
func (c *checkpointer) idle(ctx context.Context) error {
	c.mu.Lock()
	idled := c.idled
	c.mu.Unlock()
	if idled == nil {
		return nil
	}
	select {
	case <-idled:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stop cancels a running upload and ends the upload goroutine.
func (c *checkpointer) stop() {
	c.cancel()
	close(c.jobs)
	c.wg.Wait()
}

func (c *checkpointer) state() (lastOK time.Time, lastOffset int64, lastErr error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastOK, c.lastOffset, c.lastErr
}

// touch records that the stored checkpoint still covers the partition at t
// (nothing was processed since).
func (c *checkpointer) touch(t time.Time) {
	c.mu.Lock()
	c.lastOK = t
	c.mu.Unlock()
}
