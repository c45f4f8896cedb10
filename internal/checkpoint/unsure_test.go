package checkpoint

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
)

// lostAnswerBucket stores the first create-only manifest write but answers
// errExists (an earlier attempt landed, its answer was lost), and fails the
// next read of that manifest (a transient error).
type lostAnswerBucket struct {
	bucket
	armed    atomic.Bool
	failRead atomic.Bool
}

func (b *lostAnswerBucket) Put(ctx context.Context, key string, r io.Reader, createOnly bool) (int64, error) {
	if createOnly && strings.Contains(key, "/manifests/") && b.armed.CompareAndSwap(true, false) {
		if _, err := b.bucket.Put(ctx, key, r, createOnly); err != nil {
			return 0, err
		}
		b.failRead.Store(true)
		return 0, errExists
	}
	return b.bucket.Put(ctx, key, r, createOnly)
}

func (b *lostAnswerBucket) Get(ctx context.Context, key string, off int64) (io.ReadCloser, error) {
	if strings.Contains(key, "/manifests/") && b.failRead.CompareAndSwap(true, false) {
		return nil, errors.New("connection reset (test)")
	}
	return b.bucket.Get(ctx, key, off)
}

// TestUnsureManifestIsNotAFence: a manifest write whose answer was lost and
// whose read-back failed is neither a success nor a fence; the next Commit
// finds it was its own and goes on with the next sequence.
func TestUnsureManifestIsNotAFence(t *testing.T) {
	o := testOptions(nil)
	o.MaxAttempts = 1
	s := openT(t, "mem://unsure", o)
	lb := &lostAnswerBucket{bucket: s.bkt}
	s.bkt = lb
	ctx := context.Background()
	p := s.Partition("g", "t", 0)
	if _, err := p.Restore(ctx, loadAll(new([][32]byte))); !errors.Is(err, ErrNoCheckpoint) {
		t.Fatalf("restore on an empty store: %v", err)
	}
	if err := p.Claim(ctx, "test"); err != nil {
		t.Fatalf("claim: %v", err)
	}
	st := state{offset: 10, gens: []Generation{gen(1, false, 1, 1000)}}
	lb.armed.Store(true)
	_, err := p.Commit(ctx, st.checkpoint())
	if err == nil {
		t.Fatal("commit with an unreadable, existing manifest reported success")
	}
	if errors.Is(err, ErrFenced) {
		t.Fatalf("a failed read-back was taken for a fence: %v", err)
	}
	st.offset = 20
	m, err := p.Commit(ctx, st.checkpoint())
	if err != nil {
		t.Fatalf("next commit: %v", err)
	}
	first := m.Seq - 1
	if first == 0 {
		t.Fatalf("next commit took sequence %d: the unsure one was not settled as ours", m.Seq)
	}
	restoreT(t, s, st)
}
