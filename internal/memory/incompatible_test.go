package memory

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/checkpoint"
	"github.com/bloomgate/bloomgate/internal/worker"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// TestIncompatibleWords pins testdata/incompatible.golden: the words of a
// refused memory, as run stops with them and `bloomgate check` shows them
// (Finding, Fix), for a key, a normalization, a filter kind, a hash and a
// repartitioned key changed.
func TestIncompatibleWords(t *testing.T) {
	keyA := checkpoint.KeyIdentity{Spec: "json:order_id", Normalize: "none", Hash: "murmur3-x64-128"}
	with := func(f func(*checkpoint.KeyIdentity)) checkpoint.KeyIdentity { k := keyA; f(&k); return k }
	cases := []struct {
		name string
		e    *IncompatibleError
	}{
		{"--key changed, three partitions", &IncompatibleError{Group: "orders-dedup", Topic: "orders", Partitions: []int{0, 1, 2},
			RecordedKey: keyA, CurrentKey: with(func(k *checkpoint.KeyIdentity) { k.Spec = "json:id" }), RecordedKind: KindRing, CurrentKind: KindRing}},
		{"--normalize changed, one partition", &IncompatibleError{Group: "g", Topic: "urls", Partitions: []int{5},
			RecordedKey: with(func(k *checkpoint.KeyIdentity) { k.Normalize = "url" }), CurrentKey: keyA, RecordedKind: KindRing, CurrentKind: KindRing}},
		{"--filter changed", &IncompatibleError{Group: "g", Topic: "orders", Partitions: []int{0, 1, 3},
			RecordedKey: keyA, CurrentKey: keyA, RecordedKind: KindRing, CurrentKind: KindFingerprint}},
		{"hash changed", &IncompatibleError{Group: "g", Topic: "orders", Partitions: []int{0},
			RecordedKey: with(func(k *checkpoint.KeyIdentity) { k.Hash = "murmur3-x64-128-v0" }), CurrentKey: keyA, RecordedKind: KindRing, CurrentKind: KindRing}},
		{"--key changed behind --repartition", &IncompatibleError{Group: "g", Topic: "g-repartition", Partitions: []int{0, 1},
			RecordedKey: with(func(k *checkpoint.KeyIdentity) { k.Spec = "repartition(json:order_id)" }),
			CurrentKey:  with(func(k *checkpoint.KeyIdentity) { k.Spec = "repartition(json:id)" }), RecordedKind: KindRing, CurrentKind: KindRing}},
		{"--url-rules turned on", &IncompatibleError{Group: "crawl", Topic: "links", Partitions: []int{0, 1, 2, 3},
			RecordedKey: with(func(k *checkpoint.KeyIdentity) { k.Spec, k.Normalize = "json:url", "url" }),
			CurrentKey: with(func(k *checkpoint.KeyIdentity) {
				k.Spec, k.Normalize, k.URLRules, k.URLStripParams = "json:url", "url", "strip-userinfo,strip-www,strip-session-ids", "ref"
			}), RecordedKind: KindRing, CurrentKind: KindRing}},
	}
	var b strings.Builder
	for _, tc := range cases {
		fmt.Fprintf(&b, "== %s\nerror:   %s\nfinding: %s\nfix:     %s\n", tc.name, tc.e, tc.e.Finding(), tc.e.Fix())
		for _, s := range []error{checkpoint.ErrIncompatible, worker.ErrIncompatible, worker.ErrNoUsableCheckpoint} {
			if !errors.Is(tc.e, s) {
				t.Errorf("%s: does not match %v", tc.name, s)
			}
		}
	}
	got := b.String()
	path := filepath.Join("testdata", "incompatible.golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("%s differs (rerun with -update to rewrite it):\n%s", path, got)
	}
}

// TestCheckMemory: the start's look at the checkpoints names every
// partition written with another key in one error (a partition without
// checkpoints is none of them); with the recorded key there is none. The
// restore of one such partition refuses it with the same words, once:
// no "no usable checkpoint" or "loading checkpoint" wrapped around them.
func TestCheckMemory(t *testing.T) {
	ctx := context.Background()
	params := worker.FilterParams{Window: time.Hour, Generations: 4, Capacity: 10_000, FPR: 0.01}
	keyA := checkpoint.KeyIdentity{Spec: "json:order_id", Normalize: "none", Hash: "murmur3-x64-128"}
	keyB := keyA
	keyB.Spec = "json:id"
	dir := t.TempDir()
	st := realState(t, dir)
	st.Key = keyA
	for _, p := range []int{0, 1, 3} { // partition 2: no checkpoint
		h := st.Partition(tIn, p)
		h.Restore(ctx, params)
		if err := h.Claim(ctx, "t"); err != nil {
			t.Fatal(err)
		}
		f, err := st.NewFilter(params)
		if err != nil {
			t.Fatal(err)
		}
		newLogFeed(100, time.Second).feed(f, 0, 100)
		if err := h.Commit(ctx, worker.Checkpoint{InputOffset: 100, Params: params, Snapshot: f.Snapshot(), Owner: "t"}); err != nil {
			t.Fatal(err)
		}
	}

	same := realState(t, dir)
	same.Key = keyA
	if err := same.CheckMemory(ctx, tIn, 4); err != nil {
		t.Errorf("the recorded key: %v", err)
	}

	// URL rules or stripped parameters are part of the definition, as
	// --key and --normalize are.
	withRules, withParams := keyA, keyA
	withRules.URLRules = "strip-www"
	withParams.URLStripParams = "ref"
	for _, k := range []checkpoint.KeyIdentity{withRules, withParams} {
		s := realState(t, dir)
		s.Key = k
		var e *IncompatibleError
		if err := s.CheckMemory(ctx, tIn, 4); !errors.As(err, &e) || !slices.Equal(e.Partitions, []int{0, 1, 3}) || e.CurrentKey != k {
			t.Errorf("%s: %v, want an *IncompatibleError naming partitions 0, 1, 3", k, err)
		}
	}

	other := realState(t, dir)
	other.Key = keyB
	err := other.CheckMemory(ctx, tIn, 4)
	var e *IncompatibleError
	if !errors.As(err, &e) || !errors.Is(err, worker.ErrIncompatible) {
		t.Fatalf("another key: %v, want an *IncompatibleError", err)
	}
	if !slices.Equal(e.Partitions, []int{0, 1, 3}) || e.RecordedKey != keyA || e.CurrentKey != keyB || e.Group != "g" || e.Topic != tIn {
		t.Errorf("another key: %+v", e)
	}

	_, err = other.Partition(tIn, 1).Restore(ctx, params)
	if !errors.Is(err, worker.ErrNoUsableCheckpoint) || !errors.Is(err, worker.ErrIncompatible) {
		t.Fatalf("restore with another key: %v", err)
	}
	want := (&IncompatibleError{Group: "g", Topic: tIn, Partitions: []int{1}, RecordedKey: keyA, CurrentKey: keyB,
		RecordedKind: KindRing, CurrentKind: KindRing}).Error()
	if err.Error() != want {
		t.Errorf("restore with another key:\n%s\nwant\n%s", err, want)
	}
}
