package exact

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
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
	for i := 0; i < n; i++ {
		k := r.keys[16*i : 16*i+16]
		if i > 0 && bytes.Compare(r.keys[16*(i-1):16*i], k) >= 0 {
			return nil, fmt.Errorf("%w: %s: hashes not strictly ascending at %d", errMalformed, name, i)
		}
		if i%fenceEvery == 0 {
			r.fence = append(r.fence, binary.BigEndian.Uint64(k[:8]), binary.BigEndian.Uint64(k[8:]))
		}
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

// has reports whether h is in the run.
func (r *run) has(h Hash) bool {
	hi, lo := binary.BigEndian.Uint64(h[:8]), binary.BigEndian.Uint64(h[8:])
	nf := len(r.fence) / 2
	// The first fence above h; the block before it is the only one that
	// can hold h.
	b := sort.Search(nf, func(i int) bool { return cmp128(r.fence[2*i], r.fence[2*i+1], hi, lo) > 0 })
	if b == 0 {
		return false
	}
	lo16, hi16 := (b-1)*fenceEvery, min(b*fenceEvery, r.n)
	for lo16 < hi16 {
		m := int(uint(lo16+hi16) >> 1)
		k := r.keys[16*m : 16*m+16]
		switch cmp128(binary.BigEndian.Uint64(k[:8]), binary.BigEndian.Uint64(k[8:]), hi, lo) {
		case 0:
			return true
		case -1:
			lo16 = m + 1
		default:
			hi16 = m
		}
	}
	return false
}

// at returns the i-th hash.
func (r *run) at(i int) Hash { return Hash(r.keys[16*i : 16*i+16]) }

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
	f    *os.File
	w    *bufio.Writer
	crc  hashWriter
	n    uint64
	last Hash
}

type hashWriter struct {
	w   io.Writer
	sum uint32
}

func (h *hashWriter) Write(p []byte) (int, error) {
	h.sum = crc32.Update(h.sum, castagnoli, p)
	return h.w.Write(p)
}

func createRun(path string, gen uint64) (*runWriter, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, err
	}
	rw := &runWriter{f: f, w: bufio.NewWriterSize(f, 256<<10)}
	rw.crc.w = rw.w
	var hdr [runHeader]byte
	copy(hdr[:8], runMagic)
	binary.BigEndian.PutUint64(hdr[8:], gen)
	if _, err := rw.crc.Write(hdr[:]); err != nil {
		rw.abort()
		return nil, err
	}
	return rw, nil
}

// add appends h, which must be above every hash added before (duplicates
// are dropped here).
func (rw *runWriter) add(h Hash) error {
	if rw.n > 0 && h == rw.last {
		return nil
	}
	rw.last = h
	rw.n++
	_, err := rw.crc.Write(h[:])
	return err
}

// finish writes the footer and closes the file.
func (rw *runWriter) finish() (int64, error) {
	var foot [runFooter]byte
	binary.BigEndian.PutUint64(foot[:8], rw.n)
	if _, err := rw.crc.Write(foot[:8]); err != nil {
		rw.abort()
		return 0, err
	}
	binary.BigEndian.PutUint32(foot[8:], rw.crc.sum)
	if _, err := rw.w.Write(foot[8:]); err != nil {
		rw.abort()
		return 0, err
	}
	if err := rw.w.Flush(); err != nil {
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
	pos := make([]int, len(rs))
	for step := 0; ; step++ {
		if step%(1<<16) == 0 && ctx.Err() != nil {
			w.abort()
			return 0, ctx.Err()
		}
		best := -1
		var bh Hash
		for i, r := range rs {
			if pos[i] == r.n {
				continue
			}
			if h := r.at(pos[i]); best < 0 || bytes.Compare(h[:], bh[:]) < 0 {
				best, bh = i, h
			}
		}
		if best < 0 {
			break
		}
		pos[best]++
		if err := w.add(bh); err != nil {
			w.abort()
			return 0, err
		}
	}
	return w.finish()
}
