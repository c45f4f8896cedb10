package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
)

// Partial restore (docs/checkpoints.md, "Partial restore"): all kept
// manifests may reference one stored object (a sealed generation, the live
// generation's base), so one corrupt object could make every checkpoint
// unusable. RestoreWith then loads the newest sound manifest in part: the
// generations that verify as stored, the others empty and marked lost, to
// be rebuilt from the input by the caller.

// Loading is one attempt of RestoreWith to load a manifest: the manifest,
// an opener for its objects, and, when Partial is set, the means to go on
// past a generation that does not load.
type Loading struct {
	Manifest *Manifest
	// Partial: the manifest did not load whole. Load every generation
	// that verifies; hand each one that does not to Lose (and a lost exact
	// store to LoseExact) and build it empty instead.
	Partial bool

	p         *Partition
	mu        sync.Mutex // Open may be called from several goroutines
	opened    []*objectReader
	fails     map[string]error // object key → why it could not be read
	lost      map[int]string   // generation index → why it is lost
	exactLost string
}

// Open opens one of the manifest's objects (a generation's object, a log
// segment's or an exact store file's ref) for verified, decoded reading.
func (l *Loading) Open(ctx context.Context, g GenerationRef) (io.ReadCloser, error) {
	if err := validRelKey(g.Key); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	r, err := l.p.s.openObject(ctx, l.p.dir+"/"+g.Key, g)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		if dataFailure(err) {
			l.failed(g.Key, err)
		}
		return nil, err
	}
	l.opened = append(l.opened, r)
	return r, nil
}

// Lose records that generation i of the manifest (its index in
// Manifest.Generations) does not load because of err, and returns nil: the
// loader builds it empty and goes on. It returns err itself when the load
// is not partial or err is not the data's fault (the store unreachable, a
// local failure, cancellation, incompatible settings): then the loader
// must fail.
func (l *Loading) Lose(i int, err error) error {
	if !l.Partial || !dataFailure(err) || errors.Is(err, ErrIncompatible) || i < 0 || i >= len(l.Manifest.Generations) {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lost[i] = err.Error()
	return nil
}

// LoseExact is Lose for the manifest's exact store (Manifest.Exact): the
// loader starts an empty store instead, and every generation's keys are
// unverified in it.
func (l *Loading) LoseExact(err error) error {
	if !l.Partial || !dataFailure(err) || errors.Is(err, ErrIncompatible) || l.Manifest.Exact == nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.exactLost = err.Error()
	return nil
}

func (l *Loading) failed(key string, err error) {
	if l.fails == nil {
		l.fails = map[string]error{}
	}
	if _, ok := l.fails[key]; !ok {
		l.fails[key] = err
	}
}

// lostObjects are the objects of the lost parts, whose verification
// failures the load ignores.
func (l *Loading) lostObjects() map[string]bool {
	out := map[string]bool{}
	for i := range l.lost {
		for _, k := range l.Manifest.Generations[i].objects() {
			out[k] = true
		}
	}
	if l.exactLost != "" {
		for _, f := range l.Manifest.Exact.Files {
			out[f.Key] = true
		}
	}
	return out
}

// result is the manifest as loaded: lost generations name no object, and
// a lost exact store is gone (every generation's exact generation with it).
func (l *Loading) result() *Manifest {
	m := *l.Manifest
	m.Generations = slices.Clone(m.Generations)
	for i, why := range l.lost {
		m.Generations[i] = m.Generations[i].asLost(why)
	}
	if l.exactLost != "" {
		m.Exact = nil
		for i := range m.Generations {
			m.Generations[i].ExactGen = 0
			m.Generations[i].ExactGens = nil
		}
	}
	return &m
}

// restoring is what one restore learned beyond the manifest it returns.
type restoring struct {
	seqs    []uint64
	read    map[uint64]*Manifest // manifests read, by sequence
	partial []*Manifest          // sound manifests that did not load whole, newest first
	failed  map[string]error     // objects that failed verification or were missing
}

func (r *restoring) fail(key string, err error) {
	if _, ok := r.failed[key]; !ok {
		r.failed[key] = err
	}
}

// restorePartial loads the newest sound manifest in part, unless whole (an
// older manifest that loaded whole, or nil) is to be preferred (see
// RestoreWith); when the partial load fails, older sound manifests are
// tried in part, then whole again. The loader's state is that of the
// manifest returned.
func (p *Partition) restorePartial(ctx context.Context, whole *Manifest, load func(l *Loading) error, r *restoring) (*Manifest, error) {
	newest := r.partial[0]
	if whole != nil {
		lost, exactLost, err := p.probe(ctx, newest, whole, r)
		if err != nil {
			return nil, err
		}
		if !partialPays(lost, exactLost, whole) {
			p.log.Warn(fmt.Sprintf("restored checkpoint %d, older than the newest (%d), whole: it replays from input offset %d, "+
				"which loses nothing that a partial restore of checkpoint %d would keep", whole.Seq, newest.Seq, whole.InputOffset, newest.Seq),
				"seq", whole.Seq, "newest", p.headSeq)
			return whole, nil
		}
		r.partial = r.partial[:1]
	}
	var lastErr error
	for _, m := range r.partial {
		got, err := p.load(ctx, m, true, load, r)
		if err == nil {
			p.logPartial(got, whole, m.Exact != nil && got.Exact == nil)
			return got, nil
		}
		if err := abortRestore(ctx, m.Seq, err); err != nil {
			return nil, err
		}
		lastErr = err
		p.log.Warn("checkpoint does not load even in part", "seq", m.Seq, "err", err)
	}
	if whole == nil {
		return nil, fmt.Errorf("%w: %w", errNoPartial, lastErr)
	}
	// The older whole state, loaded again: the loader last held another.
	got, err := p.load(ctx, whole, false, load, r)
	if err != nil {
		if aerr := abortRestore(ctx, whole.Seq, err); aerr != nil {
			return nil, aerr
		}
		return nil, fmt.Errorf("%w: %w", errNoPartial, err)
	}
	return got, nil
}

// errNoPartial: no sound manifest loads even in part.
var errNoPartial = errors.New("none loads even in part")

// partialPays reports whether a partial restore of a manifest that lost
// the generations lost (and the exact store if exactLost) is to be
// preferred to whole, an older manifest that loaded whole. Each is exact
// where the input still holds what it must read: whole from its input
// offset, or from the start of a generation it names lost itself (a claim
// of an earlier partial restore), the partial one from the start of every
// generation it lost (KeysFrom). The partial one is preferred only if it
// needs strictly less of the input. A lost exact store cannot be rebuilt
// (its generations' positives stay unverified until they leave the
// window), and a generation without a recorded start cannot be rebuilt at
// all: such a loss counts as needing everything.
func partialPays(lost []GenerationRef, exactLost bool, whole *Manifest) bool {
	if exactLost || len(lost) == 0 {
		return false
	}
	need, ok := earliestStart(lost, math.MaxInt64)
	if !ok {
		return false
	}
	wholeNeed, ok := earliestStart(slices.DeleteFunc(slices.Clone(whole.Generations), func(g GenerationRef) bool { return !g.IsLost() }), whole.InputOffset)
	return !ok || need > wholeNeed
}

// earliestStart is the smallest KeysFrom offset of gens, at most upTo; ok
// is false if one of them has none.
func earliestStart(gens []GenerationRef, upTo int64) (int64, bool) {
	for _, g := range gens {
		if g.KeysFrom == nil {
			return 0, false
		}
		upTo = min(upTo, g.KeysFrom.Offset)
	}
	return upTo, true
}

// probe verifies the objects of m that whole, which loaded whole, does not
// name, and returns m's generations that would be lost (those already
// marked lost included) and whether its exact store would be.
func (p *Partition) probe(ctx context.Context, m, whole *Manifest, r *restoring) (lost []GenerationRef, exactLost bool, err error) {
	verified := map[string]string{} // key → sha256 verified by whole's load
	for _, g := range whole.Generations {
		if g.IsLost() {
			continue
		}
		verified[g.Key] = g.SHA256
		for _, l := range g.Log {
			verified[l.Key] = l.SHA256
		}
	}
	if whole.Exact != nil {
		for _, f := range whole.Exact.Files {
			verified[f.Key] = f.SHA256
		}
	}
	check := func(ref GenerationRef) (bool, error) {
		if sum, ok := verified[ref.Key]; ok && sum == ref.SHA256 {
			return true, nil
		}
		ok, err := p.verifyObject(ctx, ref, r)
		if err == nil {
			verified[ref.Key] = ref.SHA256
		}
		return ok, err
	}
	for _, g := range m.Generations {
		if g.IsLost() {
			lost = append(lost, g)
			continue
		}
		refs := []GenerationRef{g}
		for _, l := range g.Log {
			refs = append(refs, l.Ref())
		}
		for _, ref := range refs {
			ok, err := check(ref)
			if err != nil {
				return nil, false, err
			}
			if !ok {
				lost = append(lost, g)
				break
			}
		}
	}
	if m.Exact != nil {
		for _, f := range m.Exact.Files {
			ok, err := check(f.Ref())
			if err != nil {
				return nil, false, err
			}
			if !ok {
				exactLost = true
				break
			}
		}
	}
	return lost, exactLost, nil
}

// verifyObject reads ref's object to its end: false if it is missing or
// fails verification, an error if the store fails.
func (p *Partition) verifyObject(ctx context.Context, ref GenerationRef, r *restoring) (bool, error) {
	if err := validRelKey(ref.Key); err != nil {
		r.fail(ref.Key, fmt.Errorf("%w: %w", ErrCorrupt, err))
		return false, nil
	}
	rd, err := p.s.openObject(ctx, p.dir+"/"+ref.Key, ref)
	if err == nil {
		err = rd.Close() // reads and verifies everything
	}
	switch {
	case err == nil:
		return true, nil
	case dataFailure(err):
		r.fail(ref.Key, err)
		return false, nil
	}
	return false, fmt.Errorf("verifying %s: %w", ref.Key, err)
}

// logPartial says what a partial restore loaded and lost.
func (p *Partition) logPartial(m, whole *Manifest, exactLost bool) {
	var lost []string
	for _, g := range m.Generations {
		if g.IsLost() {
			lost = append(lost, fmt.Sprintf("%d (%s .. %s)", g.ID, g.Start.Format("2006-01-02T15:04Z07:00"), g.End.Format("2006-01-02T15:04Z07:00")))
		}
	}
	what := "generations " + strings.Join(lost, ", ")
	switch len(lost) {
	case 0:
		what = "no generation" // only the exact store was lost
	case 1:
		what = "generation " + lost[0]
	}
	msg := fmt.Sprintf("no checkpoint loads whole; restored checkpoint %d in part: %s restored empty, to be rebuilt from the input where it still holds the keys",
		m.Seq, what)
	if exactLost {
		msg += "; its exact store was lost: positives are unverified until the generations leave the window"
	}
	if whole != nil {
		msg += fmt.Sprintf(" (the older checkpoint %d loads whole, but replaying from its input offset %d needs more of the input)", whole.Seq, whole.InputOffset)
	}
	p.log.Warn(msg, "seq", m.Seq, "newest", p.headSeq)
}

// reportCorrupt logs every object that failed verification or was
// missing, once per Store, with the sequences of the manifests that name
// it (all manifests of the partition are read for that).
func (p *Partition) reportCorrupt(ctx context.Context, r *restoring) {
	keys := slices.Sorted(maps.Keys(r.failed))
	keys = slices.DeleteFunc(keys, func(k string) bool { return !p.s.firstReport(p.dir + "/" + k) })
	if len(keys) == 0 {
		return
	}
	names := map[string][]uint64{}
	for _, seq := range r.seqs {
		m, ok := r.read[seq]
		if !ok {
			var err error
			if m, err = p.readManifest(ctx, seq); err != nil {
				continue
			}
		}
		for _, g := range m.Generations {
			for _, k := range g.objects() {
				names[k] = append(names[k], seq)
			}
		}
		if m.Exact != nil {
			for _, f := range m.Exact.Files {
				names[f.Key] = append(names[f.Key], seq)
			}
		}
	}
	for _, k := range keys {
		p.log.Error("checkpoint object corrupt or missing", "key", p.dir+"/"+k, "manifests", names[k], "err", r.failed[k])
	}
}

// firstReport reports whether key was not reported as corrupt before by
// this Store.
func (s *Store) firstReport(key string) bool {
	s.reportMu.Lock()
	defer s.reportMu.Unlock()
	if s.reported == nil {
		s.reported = map[string]bool{}
	}
	if s.reported[key] {
		return false
	}
	s.reported[key] = true
	return true
}
