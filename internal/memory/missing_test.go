package memory

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/worker"
)

// TestDeletedLiveBaseUploadedWhole: the base of the live generation's
// (table's) log chain is deleted from the store while the memory runs.
// The next commit uploads the generation whole from memory, the one after
// logs onto that new base (the journal was marked there), and the newest
// checkpoint restores byte-identical to the live filter.
func TestDeletedLiveBaseUploadedWhole(t *testing.T) {
	for _, tc := range []struct {
		kind   string
		encode func(*testing.T, worker.Filter) [][]byte
	}{
		{KindRing, encodeFilter},
		{KindFingerprint, encodeTables},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			state := func() *Store {
				st := realState(t, dir)
				st.Kind = tc.kind
				return st
			}
			params := worker.FilterParams{Window: 2 * time.Hour, Generations: 3, Capacity: 200_000, FPR: 0.01}
			in := newLogFeed(41_000, time.Millisecond)
			st := state()
			h := st.Partition(tIn, 0)
			h.Restore(ctx, params)
			if err := h.Claim(ctx, "t"); err != nil {
				t.Fatal(err)
			}
			f, err := st.NewFilter(params)
			if err != nil {
				t.Fatal(err)
			}
			liveRef := func() (key string, segments int) {
				gens := inspectFirst(t, dir).Generations
				g := gens[len(gens)-1]
				return g.Key, len(g.Log)
			}
			// A base of 40,000 records, then logs of 200.
			from := 0
			commit := func(to int) {
				t.Helper()
				in.feed(f, from, to)
				from = to
				if err := h.Commit(ctx, worker.Checkpoint{InputOffset: int64(to), Params: params, Snapshot: f.Snapshot(), Owner: "t"}); err != nil {
					t.Fatal(err)
				}
			}
			commit(40_000)
			commit(40_200)
			base, n := liveRef()
			if n != 1 {
				t.Fatalf("live chain of %d segments after a log commit, want 1", n)
			}
			if err := os.Remove(filepath.Join(dir, "g", tIn, "0", base)); err != nil {
				t.Fatal(err)
			}

			commit(40_400)
			newBase, n := liveRef()
			if newBase == base || n != 0 {
				t.Fatalf("after the base was deleted: live generation %s with %d segments, want a new base (was %s) and no log", newBase, n, base)
			}
			commit(40_600)
			if key, n := liveRef(); key != newBase || n != 1 {
				t.Fatalf("next commit: live generation %s with %d segments, want one segment onto %s", key, n, newBase)
			}
			r, err := state().Partition(tIn, 0).Restore(ctx, params)
			if err != nil {
				t.Fatal(err)
			}
			if r.InputOffset != 40_600 {
				t.Fatalf("restored offset %d, want 40600", r.InputOffset)
			}
			sameEncoding(t, "restored after the base was uploaded again", tc.encode(t, r.Filter), tc.encode(t, f))
		})
	}
}
