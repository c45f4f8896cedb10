package memory

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/worker"
)

// TestMaxTimeJumpKeepsMemory: one record stamped a century ahead does not
// rotate the ring away: a key seen a second earlier is still a duplicate.
// Without the bound the same sequence forgets it (the failure it guards).
func TestMaxTimeJumpKeepsMemory(t *testing.T) {
	t.Parallel()
	params := worker.FilterParams{Window: time.Hour, Generations: 4, Capacity: 10_000, FPR: 1e-6}
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		jump     time.Duration
		wantSeen bool
	}{
		{"bounded", time.Hour, true},
		{"unbounded", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := realState(t, t.TempDir())
			st.MaxTimeJump = tc.jump
			f, err := st.NewFilter(params)
			if err != nil {
				t.Fatal(err)
			}
			f.TestAndAdd([]byte("order-a"), t0)
			f.TestAndAdd([]byte("bad-clock"), t0.AddDate(100, 0, 0))
			if got := f.TestAndAdd([]byte("order-a"), t0.Add(time.Second)); got != tc.wantSeen {
				t.Fatalf("order-a after a far-future record: seen = %v, want %v", got, tc.wantSeen)
			}
			if tc.jump > 0 && f.Stats().ClampedTimestamps != 1 {
				t.Fatalf("clamped timestamps = %d, want 1", f.Stats().ClampedTimestamps)
			}
		})
	}
}

// TestMaxTimeJumpCatchesUp: after a real gap longer than the window, event
// time catches up by the bound per record, and the old keys are then
// forgotten as the window says.
func TestMaxTimeJumpCatchesUp(t *testing.T) {
	t.Parallel()
	params := worker.FilterParams{Window: time.Hour, Generations: 4, Capacity: 10_000, FPR: 1e-6}
	st := realState(t, t.TempDir())
	st.MaxTimeJump = 10 * time.Minute
	f, err := st.NewFilter(params)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	f.TestAndAdd([]byte("old"), t0)
	later := t0.Add(24 * time.Hour)
	for i := range 20 { // 20 × 10 min > window × G/(G-1)
		f.TestAndAdd([]byte{byte(i)}, later)
	}
	if f.TestAndAdd([]byte("old"), later) {
		t.Fatal("a key a day older than a 1h window is still remembered after the catch-up")
	}
}

// TestMaxTimeJumpFrontierCheckpointed: the event-time frontier travels with
// the checkpoint, so a restored filter bounds jumps as the original did.
func TestMaxTimeJumpFrontierCheckpointed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	params := worker.FilterParams{Window: time.Hour, Generations: 4, Capacity: 10_000, FPR: 1e-6}
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

	st := realState(t, dir)
	st.MaxTimeJump = time.Hour
	part := st.Partition(tIn, 0)
	if _, err := part.Restore(ctx, params); !errors.Is(err, worker.ErrNoCheckpoint) {
		t.Fatalf("restore of nothing: %v", err)
	}
	if err := part.Claim(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	f, err := st.NewFilter(params)
	if err != nil {
		t.Fatal(err)
	}
	f.TestAndAdd([]byte("order-a"), t0)
	sn := f.Snapshot()
	err = part.Commit(ctx, worker.Checkpoint{InputOffset: 1, Params: params, Snapshot: sn, Owner: "a"})
	sn.Release()
	if err != nil {
		t.Fatalf("commit: %v", err)
	}

	st2 := realState(t, dir)
	st2.MaxTimeJump = time.Hour
	r, err := st2.Partition(tIn, 0).Restore(ctx, params)
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	r.Filter.TestAndAdd([]byte("bad-clock"), t0.AddDate(100, 0, 0))
	if !r.Filter.TestAndAdd([]byte("order-a"), t0.Add(time.Second)) {
		t.Fatal("after restore, a far-future record made the filter forget a key inside the window")
	}
	if got := r.Filter.Stats().ClampedTimestamps; got != 1 {
		t.Fatalf("restored filter clamped %d timestamps, want 1 (frontier not restored?)", got)
	}
}
