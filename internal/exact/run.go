package exact

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/bits"
	"os"
	"slices"
	"sort"
	"sync/atomic"
)

// A run is an immutable file of one generation's hashes, sorted:
//
//	magic "bgexrun1" (8) ‖ generation (8, big-endian)
//	‖ count × hash (16 each, strictly ascending as bytes)
//	‖ count (8, big-endian) ‖ CRC-32C (Castagnoli) of everything before (4, big-endian)
//
// The count sits in the footer so that a merge can stream its output
// without knowing it in advance; a reader checks it against the size.
const (
	runMagic  = "bgexrun1"
	runHeader = 16
	runFooter = 12
	runExt    = ".run"

	// fenceEvery: one in-memory fence key per this many hashes. A lookup
	// binary-searches the fences (memory), then at most fenceEvery hashes
	// (2 KiB, at most two pages) of the mapped file. Memory: 16 bytes per
	// fence, 0.125 bytes per key.
	fenceEvery = 128
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errMalformed wraps every way a run file or manifest can be malformed.
var errMalformed = errors.New("malformed store file")

type run struct {
	name  string
	gen   uint64
	n     int
	size  int64
	data  []byte   // the mapped file
	keys  []byte   // data[runHeader : runHeader+16n]
	fence []uint64 // hi, lo of every fenceEvery-th hash

	// refs: the store holds one while the run is live; a merge reading it
	// holds another. The last release unmaps it and, if it was removed
	// from the store, deletes the file.
	refs    atomic.Int32
	path    string
	removed atomic.Bool
}

// parseRun checks a run's bytes (header, order, footer, checksum) and
// indexes it. data must stay valid as long as the run is used.
func parseRun(name string, data []byte) (*run, error) {
	if len(data) < runHeader+runFooter {
		return nil, fmt.Errorf("%w: %s: %d bytes", errMalformed, name, len(data))
	}
	if string(data[:8]) != runMagic {
		return nil, fmt.Errorf("%w: %s: bad magic", errMalformed, name)
	}
	body := len(data) - runHeader - runFooter
	if body%16 != 0 {
		return nil, fmt.Errorf("%w: %s: %d bytes of hashes is not a multiple of 16", errMalformed, name, body)
	}
	n := body / 16
	foot := data[len(data)-runFooter:]
	if c := binary.BigEndian.Uint64(foot[:8]); c != uint64(n) {
		return nil, fmt.Errorf("%w: %s: footer counts %d hashes, file holds %d", errMalformed, name, c, n)
	}
	if sum := crc32.Checksum(data[:len(data)-4], castagnoli); sum != binary.BigEndian.Uint32(foot[8:]) {
		return nil, fmt.Errorf("%w: %s: checksum mismatch", errMalformed, name)
	}
	r := &run{name: name, gen: binary.BigEndian.Uint64(data[8:16]), n: n, size: int64(len(data)), data: data, keys: data[runHeader : runHeader+16*n]}
	r.fence = make([]uint64, 0, 2*((n+fenceEvery-1)/fenceEvery))
	var phi, plo uint64
	for i := 0; i < n; i++ {
		hi, lo := r.half(i)
		if i > 0 && cmp128(phi, plo, hi, lo) >= 0 {
			return nil, fmt.Errorf("%w: %s: hashes not strictly ascending at %d", errMalformed, name, i)
		}
		if i%fenceEvery == 0 {
			r.fence = append(r.fence, hi, lo)
		}
		phi, plo = hi, lo
	}
	return r, nil
}

func cmp128(ahi, alo, bhi, blo uint64) int {
	switch {
	case ahi < bhi:
		return -1
	case ahi > bhi:
		return 1
	case alo < blo:
		return -1
	case alo > blo:
		return 1
	}
	return 0
}

// has reports whether h is in the run. Hashes are uniform, so the
// position of h is predictable: the fence index is entered at hi/2⁶⁴ of
// its length and the block at h's place between its first hash and the
// next fence's, and each search goes outward from there. A lookup then
// touches about two cache lines of the index and one or two of the mapped
// file instead of bisecting both (which costs a cache miss per step).
func (r *run) has(h Hash) bool {
	hi, lo := h.halves()
	nf := len(r.fence) / 2
	g, _ := bits.Mul64(hi, uint64(nf))
	b := firstAbove(nf, int(g), func(i int) bool { return cmp128(r.fence[2*i], r.fence[2*i+1], hi, lo) > 0 }) - 1
	if b < 0 {
		return false
	}
	start, end := b*fenceEvery, min((b+1)*fenceEvery, r.n)
	// Interpolate between this fence and the next (or the end of the key
	// space).
	first, next := r.fence[2*b], uint64(math.MaxUint64)
	if b+1 < nf {
		next = r.fence[2*b+2]
	}
	guess := 0
	if next > first {
		guess = int(float64(hi-first) / float64(next-first) * float64(end-start))
	}
	i := start + firstAbove(end-start, guess, func(j int) bool {
		khi, klo := r.half(start + j)
		return cmp128(khi, klo, hi, lo) > 0
	})
	if i == start {
		return false
	}
	khi, klo := r.half(i - 1)
	return khi == hi && klo == lo
}

// firstAbove returns the smallest i in [0, n] with above(i) (n if none),
// for above false up to some index and true from there on. It gallops
// outward from guess (clamped into range) to bracket the answer, then
// bisects the bracket: O(log distance) probes, all near the guess.
func firstAbove(n, guess int, above func(int) bool) int {
	guess = min(max(guess, 0), n)
	a, b := guess, guess // the answer is in [a, b]
	for step := 1; a > 0 && above(a-1); step *= 2 {
		b, a = a-1, max(a-step, 0)
	}
	for step := 1; b < n && !above(b); step *= 2 {
		a, b = b+1, min(b+step, n)
	}
	return a + sort.Search(b-a, func(j int) bool { return above(a + j) })
}

// at returns the i-th hash.
func (r *run) at(i int) Hash { return Hash(r.keys[16*i : 16*i+16]) }

// half returns the i-th hash as its two halves.
func (r *run) half(i int) (hi, lo uint64) {
	k := r.keys[16*i : 16*i+16]
	return binary.BigEndian.Uint64(k[:8]), binary.BigEndian.Uint64(k[8:])
}

// release drops one reference; the last one unmaps the run and deletes
// its file if the store removed it.
func (r *run) release() error {
	if r.refs.Add(-1) != 0 {
		return nil
	}
	err := unmapFile(r.data)
	r.data, r.keys = nil, nil
	if r.removed.Load() {
		if rerr := os.Remove(r.path); rerr != nil && err == nil {
			err = rerr
		}
	}
	return err
}

// runWriter streams hashes (ascending) into a new run file.
type runWriter struct {
	f      *os.File
	buf    []byte
	crc    uint32
	n      uint64
	hi, lo uint64 // the last hash added
}

const runWriteChunk = 64 << 10

func createRun(path string, gen uint64) (*runWriter, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, err
	}
	rw := &runWriter{f: f, buf: make([]byte, 0, runWriteChunk)}
	rw.buf = append(rw.buf, runMagic...)
	rw.buf = binary.BigEndian.AppendUint64(rw.buf, gen)
	return rw, nil
}

// add appends the hash (hi, lo), which must not be below the one added
// before (an equal one is dropped).
func (rw *runWriter) add(hi, lo uint64) error {
	if rw.n > 0 && hi == rw.hi && lo == rw.lo {
		return nil
	}
	rw.hi, rw.lo = hi, lo
	rw.n++
	rw.buf = binary.BigEndian.AppendUint64(rw.buf, hi)
	rw.buf = binary.BigEndian.AppendUint64(rw.buf, lo)
	if len(rw.buf) > runWriteChunk-16 {
		return rw.flush()
	}
	return nil
}

func (rw *runWriter) flush() error {
	rw.crc = crc32.Update(rw.crc, castagnoli, rw.buf)
	_, err := rw.f.Write(rw.buf)
	rw.buf = rw.buf[:0]
	return err
}

// finish writes the footer and closes the file.
func (rw *runWriter) finish() (int64, error) {
	rw.buf = binary.BigEndian.AppendUint64(rw.buf, rw.n)
	rw.crc = crc32.Update(rw.crc, castagnoli, rw.buf)
	rw.buf = binary.BigEndian.AppendUint32(rw.buf, rw.crc)
	if _, err := rw.f.Write(rw.buf); err != nil {
		rw.abort()
		return 0, err
	}
	size := runHeader + runFooter + 16*int64(rw.n)
	if err := rw.f.Close(); err != nil {
		_ = os.Remove(rw.f.Name())
		return 0, err
	}
	return size, nil
}

func (rw *runWriter) abort() {
	_ = rw.f.Close()
	_ = os.Remove(rw.f.Name())
}

// openRun maps and checks the run file at path.
func openRun(path, name string) (*run, error) {
	data, err := mapFile(path)
	if err != nil {
		return nil, err
	}
	r, err := parseRun(name, data)
	if err != nil {
		_ = unmapFile(data)
		return nil, err
	}
	r.path = path
	r.refs.Store(1)
	return r, nil
}

// mergeRuns writes the union of rs (all of generation gen) to path.
func mergeRuns(ctx context.Context, path string, gen uint64, rs []*run) (int64, error) {
	w, err := createRun(path, gen)
	if err != nil {
		return 0, err
	}
	type head struct {
		r      *run
		i      int
		hi, lo uint64
	}
	heads := make([]head, 0, len(rs))
	for _, r := range rs {
		if r.n > 0 {
			hi, lo := r.half(0)
			heads = append(heads, head{r, 0, hi, lo})
		}
	}
	for step := 0; len(heads) > 0; step++ {
		if step%(1<<16) == 0 && ctx.Err() != nil {
			w.abort()
			return 0, ctx.Err()
		}
		best := 0
		for i := 1; i < len(heads); i++ {
			if cmp128(heads[i].hi, heads[i].lo, heads[best].hi, heads[best].lo) < 0 {
				best = i
			}
		}
		h := &heads[best]
		if err := w.add(h.hi, h.lo); err != nil {
			w.abort()
			return 0, err
		}
		if h.i++; h.i == h.r.n {
			heads = slices.Delete(heads, best, best+1)
		} else {
			h.hi, h.lo = h.r.half(h.i)
		}
	}
	return w.finish()
}
