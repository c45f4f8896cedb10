package checkpoint

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"log/slog"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/bloomgate/bloomgate/internal/errmark"
)

// Restore loads the partition's newest usable checkpoint, whole: it walks
// the manifests newest first; for each it calls load with the manifest and
// an opener for its objects. Readers from open yield the object's own
// bytes (decompressed) and verify length and SHA-256 of the stored object;
// a mismatch, a truncated or missing object or an undecodable stream is an
// error wrapping ErrCorrupt. Whatever load leaves unread is read and
// verified when load returns, so a loader that stops early cannot accept
// unverified data.
//
// If a manifest or its objects are corrupt or missing, or load fails, the
// failure is logged, counted in bloomgate_checkpoint_restore_fallbacks_total,
// and the previous manifest is tried. If the store is unreachable (errors
// wrapping ErrUnavailable), refuses access, load fails locally (ErrLocal),
// or ctx ends, Restore returns that error at once: an outage is not a
// reason to fall back to older state.
//
// A load error wrapping ErrIncompatible (the state was written with
// settings that cannot be carried over) is returned at once, as the
// loader worded it and matching ErrNoUsableCheckpoint too, without trying
// older manifests.
//
// Restore never loads part of a manifest (RestoreWith does, for a loader
// that can).
//
// ErrNoCheckpoint: no checkpoint exists (or only empty claims).
// ErrNoUsableCheckpoint: checkpoints exist, none could be loaded.
func (p *Partition) Restore(ctx context.Context,
	load func(m *Manifest, open func(ctx context.Context, g GenerationRef) (io.ReadCloser, error)) error,
) (*Manifest, error) {
	return p.restore(ctx, false, func(l *Loading) error { return load(l.Manifest, l.Open) })
}

// RestoreWith is Restore for a loader that can load a manifest in part
// (docs/checkpoints.md, "Partial restore"). It first walks the manifests
// as Restore does, loading each whole. If the newest one whose manifest
// object is sound does not load whole, it calls load again on it with
// Loading.Partial set: the loader loads every generation that verifies
// and hands each one that does not to Loading.Lose (and a lost exact store
// to Loading.LoseExact), building it empty instead. The manifest returned
// then names those generations as lost (GenerationRef.Lost) and no longer
// their objects; Claim writes it so, and no later manifest of this handle
// names a lost object.
//
// An older manifest that loads whole is preferred to a newer one loaded in
// part unless everything the newer one lost is a generation whose keys
// begin (GenerationRef.KeysFrom) after the older one's input offset (and
// after the start of any generation the older one names lost): then
// rebuilding them needs less of the input than replaying from the older
// state, and is as exact (see partialPays). Every object that fails is logged
// once per Store, with the manifests that reference it.
//
// Errors are Restore's; ErrNoUsableCheckpoint only when no manifest loads
// even in part: every manifest object is corrupt, or every sound one fails
// for a reason of its own (not of a generation's objects).
func (p *Partition) RestoreWith(ctx context.Context, load func(l *Loading) error) (*Manifest, error) {
	return p.restore(ctx, true, load)
}

func (p *Partition) restore(ctx context.Context, partial bool, load func(l *Loading) error) (_ *Manifest, err error) {
	start := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	defer func() {
		if !errors.Is(err, ErrNoCheckpoint) {
			p.countFailure(err)
		}
	}()
	if p.claimed {
		return nil, errors.New("restore after claim: use a new Partition handle")
	}
	seqs, err := p.listManifestsRetry(ctx)
	if err != nil {
		return nil, fmt.Errorf("restoring: %w", err)
	}
	p.listed = true
	if len(seqs) == 0 {
		return nil, ErrNoCheckpoint
	}
	p.headSeq = seqs[len(seqs)-1]
	r := &restoring{seqs: seqs, read: map[uint64]*Manifest{}, failed: map[string]error{}}
	tried := 0
	var lastErr error
	var whole *Manifest
	for i := len(seqs) - 1; i >= 0; i-- {
		seq := seqs[i]
		m, err := p.readManifest(ctx, seq)
		if err == nil && m.Empty {
			continue
		}
		tried++
		sound := err == nil
		if sound {
			r.read[seq] = m
			whole, err = p.load(ctx, m, false, load, r)
		}
		if err == nil {
			if len(r.partial) == 0 {
				p.restoredWith(m, start)
				if tried > 1 {
					p.log.Warn("restored an older checkpoint", "seq", seq, "newest", p.headSeq)
				}
				return whole, nil
			}
			break
		}
		if err := abortRestore(ctx, seq, err); err != nil {
			return nil, err
		}
		lastErr = err
		p.m.fallbacks.Inc()
		p.log.Warn("checkpoint unusable, trying the previous one", "seq", seq, "err", err)
		if sound && partial {
			r.partial = append(r.partial, m)
		}
	}
	if tried == 0 {
		return nil, ErrNoCheckpoint
	}
	if len(r.partial) == 0 {
		return nil, fmt.Errorf("%w: %d checkpoint(s) tried, newest seq %d, last error: %w", ErrNoUsableCheckpoint, tried, p.headSeq, lastErr)
	}
	m, err := p.restorePartial(ctx, whole, load, r)
	if errors.Is(err, errNoPartial) {
		return nil, fmt.Errorf("%w: %d checkpoint(s) tried, newest seq %d, %w", ErrNoUsableCheckpoint, tried, p.headSeq, err)
	}
	if err != nil {
		return nil, err
	}
	p.reportCorrupt(ctx, r)
	p.restoredWith(m, start)
	return m, nil
}

// restoredWith records m as what this handle restored.
func (p *Partition) restoredWith(m *Manifest, start time.Time) {
	p.restored, p.last = m, m
	p.m.restoreDuration.Observe(time.Since(start).Seconds())
}

// abortRestore returns the error to stop restoring with when a manifest
// fails with err, or nil to try the next one: an outage, a local failure
// or ctx's end is not a reason to fall back, and neither is ErrIncompatible
// (older manifests were written with the same settings or earlier ones:
// falling back would not help, and would hide the reason behind "no usable
// checkpoint").
func abortRestore(ctx context.Context, seq uint64, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if !dataFailure(err) {
		return fmt.Errorf("restoring checkpoint %d: %w", seq, err)
	}
	if errors.Is(err, ErrIncompatible) {
		// The refusal says what is wrong and what to do: marked, not
		// prefixed.
		return errmark.Mark(err, ErrNoUsableCheckpoint)
	}
	return nil
}

// dataFailure reports whether err is a fault of the stored data (or of
// the loader's reading of it), as opposed to the store being unreachable
// or refusing access, a local failure, or cancellation.
func dataFailure(err error) bool {
	var se *storageError
	return !errors.As(err, &se) && !errors.Is(err, ErrUnavailable) && !errors.Is(err, ErrLocal) &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// Logger is the partition's logger (the store's, with group, topic and
// partition), for callers reporting on what Restore loaded.
func (p *Partition) Logger() *slog.Logger { return p.log }

// load runs the caller's loader on m and verifies every object it opened.
// It returns m as loaded: m itself, or for a partial load a copy naming
// the lost generations.
func (p *Partition) load(ctx context.Context, m *Manifest, partial bool, load func(l *Loading) error, r *restoring) (*Manifest, error) {
	l := &Loading{Manifest: m, Partial: partial, p: p, lost: map[int]string{}}
	err := load(l)
	l.mu.Lock()
	defer l.mu.Unlock()
	ignore := l.lostObjects()
	for _, rd := range l.opened {
		cerr := rd.Close()
		if cerr == nil {
			continue
		}
		if dataFailure(cerr) {
			l.failed(rd.ref.Key, cerr)
		}
		if err == nil && !ignore[rd.ref.Key] {
			err = cerr
		}
	}
	for k, e := range l.fails {
		r.fail(k, e)
	}
	if errors.Is(err, ErrIncompatible) {
		return nil, err // the loader's refusal is about the settings, not this checkpoint
	}
	if err != nil {
		return nil, fmt.Errorf("loading checkpoint %d: %w", m.Seq, err)
	}
	if len(l.lost) == 0 && l.exactLost == "" {
		return m, nil
	}
	return l.result(), nil
}

// openObject opens a generation object for verified, decoded reading.
func (s *Store) openObject(ctx context.Context, key string, g GenerationRef) (*objectReader, error) {
	v := &verifyingReader{ctx: ctx, s: s, key: key, want: g.Bytes, crc: crc32.New(castagnoli), sha: sha256.New(), ref: g}
	// Open now, so a missing object is reported by open, not on first read.
	if err := v.open(); err != nil {
		return nil, err
	}
	r := &objectReader{v: v, ref: g}
	switch g.Encoding {
	case encodingNone:
		r.dec = v
	case encodingZstd:
		zr, err := zstd.NewReader(v, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(64<<20),
			zstd.WithDecoderMaxMemory(uint64(max(g.RawBytes, 64<<20))+1<<20))
		if err != nil {
			v.close()
			return nil, fmt.Errorf("opening decoder: %w", err)
		}
		r.zr = zr
		r.dec = zr
	default:
		v.close()
		return nil, fmt.Errorf("%w: unknown encoding %q", ErrCorrupt, g.Encoding)
	}
	return r, nil
}

// objectReader yields a generation's decoded bytes.
type objectReader struct {
	v      *verifyingReader
	zr     *zstd.Decoder
	dec    io.Reader
	ref    GenerationRef
	raw    int64
	err    error
	closed bool
}

func (r *objectReader) Read(b []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	n, err := r.dec.Read(b)
	r.raw += int64(n)
	if r.raw > r.ref.RawBytes {
		r.err = fmt.Errorf("%w: %s decodes to more than %d bytes", ErrCorrupt, r.ref.Key, r.ref.RawBytes)
		return n, r.err
	}
	switch {
	case err == io.EOF:
		if r.raw != r.ref.RawBytes {
			r.err = fmt.Errorf("%w: %s decodes to %d bytes, manifest says %d", ErrCorrupt, r.ref.Key, r.raw, r.ref.RawBytes)
			return n, r.err
		}
		return n, io.EOF
	case err != nil:
		if r.v.err != nil && r.v.err != io.EOF {
			r.err = r.v.err // the stored stream's own failure (corrupt, unavailable)
		} else {
			r.err = fmt.Errorf("%w: decoding %s: %w", ErrCorrupt, r.ref.Key, err)
		}
		return n, r.err
	}
	return n, nil
}

// Close reads and verifies what the caller left unread, and releases the
// stream. It returns the verification error, if any.
func (r *objectReader) Close() error {
	if r.closed {
		return r.err
	}
	r.closed = true
	if r.err == nil {
		if _, err := io.Copy(io.Discard, r); err != nil {
			r.err = err
		}
	}
	if r.zr != nil {
		r.zr.Close()
	}
	if r.err == nil {
		// The decoder may stop at the end of the frame without reading the
		// stored stream's EOF: drain it so length and checksum get checked.
		if _, err := io.Copy(io.Discard, r.v); err != nil {
			r.err = err
		}
	}
	r.v.close()
	return r.err
}

// verifyingReader reads a stored object, resuming with a ranged GET after a
// transient read error, and checks its length and SHA-256 at the end.
type verifyingReader struct {
	ctx     context.Context
	s       *Store
	key     string
	ref     GenerationRef
	want    int64
	off     int64
	crc     hash.Hash32
	sha     hash.Hash
	rc      io.ReadCloser
	err     error // sticky: io.EOF after successful verification
	resumes int
	// stall cancels the current body when one Read waits longer than
	// RequestTimeout (a server that stops sending without closing).
	stall  *time.Timer
	cancel context.CancelFunc
}

func (v *verifyingReader) open() error {
	err := v.s.retry.do(v.ctx, func(ctx context.Context) error {
		// The body outlives this attempt: its own context, cancelled by
		// close or by the stall watchdog.
		bctx, cancel := context.WithCancel(v.ctx)
		rc, err := v.s.bkt.Get(bctx, v.key, v.off)
		if err != nil {
			cancel()
			return err
		}
		v.rc, v.cancel = rc, cancel
		if t := v.s.retry.timeout; t > 0 {
			v.stall = time.AfterFunc(t, cancel)
			v.stall.Stop()
		}
		return nil
	})
	if errors.Is(err, errNotExist) {
		return fmt.Errorf("%w: object %s is missing", ErrCorrupt, v.key)
	}
	if err != nil {
		return &storageError{fmt.Errorf("opening %s: %w", v.key, err)}
	}
	return nil
}

func (v *verifyingReader) Read(b []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	for {
		if v.rc == nil {
			if err := v.open(); err != nil {
				v.err = err
				return 0, err
			}
		}
		if v.stall != nil {
			v.stall.Reset(v.s.retry.timeout)
		}
		n, err := v.rc.Read(b)
		if v.stall != nil {
			v.stall.Stop()
		}
		if n > 0 {
			v.off += int64(n)
			v.crc.Write(b[:n])
			v.sha.Write(b[:n])
			if v.off > v.want {
				v.err = fmt.Errorf("%w: object %s is longer than %d bytes", ErrCorrupt, v.key, v.want)
				return n, v.err
			}
		}
		switch {
		case err == nil:
			return n, nil
		case err == io.EOF:
			v.err = v.verify()
			return n, v.err
		}
		// A read error mid-stream (connection reset, truncated transfer):
		// resume from the current offset.
		v.close()
		if v.ctx.Err() != nil {
			v.err = v.ctx.Err()
			return n, v.err
		}
		v.resumes++
		if v.resumes >= v.s.retry.attempts {
			v.err = &storageError{fmt.Errorf("%w: reading %s: %d resumes: %w", ErrUnavailable, v.key, v.resumes, err)}
			return n, v.err
		}
		if serr := sleep(v.ctx, v.s.retry.backoff(v.resumes)); serr != nil {
			v.err = serr
			return n, v.err
		}
		if n > 0 {
			return n, nil
		}
	}
}

func (v *verifyingReader) verify() error {
	if v.off != v.want {
		return fmt.Errorf("%w: object %s has %d bytes, manifest says %d", ErrCorrupt, v.key, v.off, v.want)
	}
	if got := hex.EncodeToString(v.sha.Sum(nil)); got != v.ref.SHA256 {
		return fmt.Errorf("%w: object %s: sha256 mismatch", ErrCorrupt, v.key)
	}
	if v.ref.CRC32C != "" {
		if got := hex.EncodeToString(v.crc.Sum(nil)); got != v.ref.CRC32C {
			return fmt.Errorf("%w: object %s: crc32c mismatch", ErrCorrupt, v.key)
		}
	}
	return io.EOF
}

func (v *verifyingReader) close() {
	if v.stall != nil {
		v.stall.Stop()
		v.stall = nil
	}
	if v.rc != nil {
		v.rc.Close()
		v.rc = nil
	}
	if v.cancel != nil {
		v.cancel()
		v.cancel = nil
	}
}

// storageError marks a failure to talk to the store (unreachable, access
// denied, ...) as opposed to bad data: Restore does not fall back on it.
type storageError struct{ err error }

func (e *storageError) Error() string { return e.err.Error() }
func (e *storageError) Unwrap() error { return e.err }
