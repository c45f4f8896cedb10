package checkpoint

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"
)

// GenerationSource streams one generation's bytes (its own binary format,
// opaque here). WriteTo is called once per upload, from a goroutine other
// than the caller of Commit.
type GenerationSource interface {
	WriteTo(w io.Writer) (int64, error)
}

// Generation is one generation of a partition's filter, as handed to Commit.
type Generation struct {
	ID      uint64
	Sealed  bool // rotated out of the write position: its bytes never change again
	Start   time.Time
	End     time.Time
	Inserts uint64
	EstKeys uint64
	Fill    float64
	EstFPR  float64
	Stacks  int
	// ExactGen is the exact store's generation holding this generation's
	// keys (GenerationRef.ExactGen; 0: none).
	ExactGen uint64
	// Capacity and FPR are the generation's own plan (GenerationRef).
	Capacity uint64
	FPR      float64
	// Ages is a table's age histogram (GenerationRef.Ages).
	Ages []uint64
	// ExactGens, for a table, are the exact store's generations of its
	// generations (GenerationRef.ExactGens).
	ExactGens []ExactSpan
	// LogShare, when set, replaces MaxLogShare for this generation's
	// chain (the filter's policy for what it stores: a share of the
	// base's stored size).
	LogShare float64
	// Source streams the bytes. Commit skips it for a sealed generation
	// that an earlier manifest of this handle already stored, and for an
	// unsealed one whose Log it stores instead.
	Source GenerationSource
	// Log, on an unsealed generation, is what the generation added since
	// a stored state of it (nil: none known; the generation is stored
	// whole, as without a log).
	Log *GenerationLog
}

// GenerationLog is a log segment of one generation: what it added since
// the stored state named After.
type GenerationLog struct {
	// After names the stored state the segment continues: the tail
	// (GenerationRef.Tail) of the generation's chain in the handle's last
	// manifest, or an earlier object of that chain (its base or a
	// segment), in which case the segment replaces the segments that
	// followed it (a merge: what they added is in it). Commit uses the
	// segment only if the last manifest's chain holds After.
	After   string
	Entries int64
	// Source streams the segment; it must write the same bytes each time
	// (Commit reads it twice: once for the digest that names the object,
	// once to upload it).
	Source GenerationSource
}

// When a log pays: an unsealed generation is stored as its base object plus
// log segments while the segments since the base add up to at most
// MaxLogShare of the base's stored size and MaxLogEntries entries, and
// whole otherwise (starting a new chain). The share bounds what a chain
// costs beyond a whole upload: storage and download at most 1.25× the
// base, and a restore replays at most a quarter of the base's size in
// 16-byte entries (measured in docs/benchmarks-journal.md, "Uploads per day",
// well under a second per partition at the crawler plan's size), while a
// partition whose inserts between two checkpoints are a small fraction of
// its live generation uploads that fraction instead of the generation at
// every checkpoint. A larger share saves little more (the next whole
// upload is due after share/rate checkpoints either way) and makes
// restores slower.
//
// MaxLogSegments bounds the manifest: each segment adds ~300 bytes (indented
// JSON) to every manifest that names the chain, so a partition with few
// inserts per checkpoint would otherwise grow its manifests towards the
// 4 MiB a reader accepts. At 256, a chain adds at most ~75 KB; for the
// crawler plan (6.5 new URLs/s, 8.3 MiB live generation) the whole uploads
// every 256 minutes and the manifests' growth then cost about the same per
// day, near the least total (docs/benchmarks-journal.md, "Uploads per day").
const (
	MaxLogShare    = 0.25
	MaxLogEntries  = 10_000_000
	MaxLogSegments = 256
)

// ExactCheckpoint is the partition's exact store handed to Commit, cut at
// the same input offset as the generations (Manifest.Exact).
type ExactCheckpoint struct {
	Layout  string
	Floor   uint64
	NextGen uint64
	Keys    int64
	Files   []ExactSource
}

// ExactSource is one file of an exact store's checkpoint, described by its
// name, size and SHA-256, and readable through Open. Commit uploads it
// unless the last manifest of this handle (written or restored) lists a
// file with the same name, size and digest; it checks that the bytes it
// read match the description.
type ExactSource struct {
	Name   string
	Size   int64
	SHA256 string
	Open   func() (io.ReadCloser, error)
}

// Checkpoint is the state of one partition at one moment.
type Checkpoint struct {
	// InputOffset is the next input offset to process: the state covers
	// every offset below it.
	InputOffset int64
	// OutputOffsets: topic -> partition -> end offset at checkpoint time.
	OutputOffsets map[string]map[int]int64
	Filter        FilterParams
	Key           *KeyIdentity // recorded in the manifest when set
	HashSeed      string       // the memory's hash seed (Manifest.HashSeed)
	Isolation     string       // the isolation level (Manifest.Isolation)
	Generations   []Generation // oldest first
	Owner         string       // worker id (host/pid), for humans
	// EventTime is the filter owner's event-time frontier (Unix ns; 0:
	// none), restored with the filter so that replay decides as the
	// original run did.
	EventTime int64
	// Seed is the position of an unfinished seeding read (Manifest.Seed).
	Seed *SeedProgress
	// SeedingUntil is Manifest.SeedingUntil.
	SeedingUntil int64
	// Exact is the exact store (nil: filter only).
	Exact *ExactCheckpoint
	// Provenance and LegacyProvenanceBefore: Manifest's fields of the
	// same names.
	Provenance             int
	LegacyProvenanceBefore map[string]map[int]int64
	// InputMark is Manifest.InputMark.
	InputMark *InputMark
	// KeysFrom is the input position from which a generation that is not
	// in the handle's last manifest got its keys (GenerationRef.KeysFrom):
	// the last committed or restored state's position, or later. nil: not
	// known (keys of another topic were read since). Generations the last
	// manifest holds keep the position recorded there.
	KeysFrom *KeysFrom
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Claim makes this handle the partition's writer. It is called once on
// assignment, after Restore: it writes manifest head+1 (a copy of what
// Restore loaded, or an empty claim when there was nothing usable), so that
// a previous owner's next Commit, which needs that sequence or a lower one,
// fails with ErrFenced.
//
// ErrFenced from Claim means another writer committed while this one
// restored: Restore again (on a new handle) and Claim again.
func (p *Partition) Claim(ctx context.Context, owner string) (err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	defer func() { p.countFailure(err) }()
	if p.fenced {
		return ErrFenced
	}
	if p.claimed {
		return errors.New("partition already claimed by this handle")
	}
	if !p.listed {
		seqs, err := p.listManifestsRetry(ctx)
		if err != nil {
			return fmt.Errorf("claiming: %w", err)
		}
		if len(seqs) > 0 {
			p.headSeq = seqs[len(seqs)-1]
		}
		p.listed = true
	}
	seq := p.headSeq + 1
	var m Manifest
	if p.restored != nil {
		m = *p.restored
		m.Generations = slices.Clone(p.restored.Generations)
	} else {
		m = Manifest{Empty: true, Group: p.group, Topic: p.topic, Partition: p.partition}
	}
	m.Seq = seq
	m.CreatedAt = p.s.opts.now().UTC()
	m.Owner = owner
	m.Writer = p.writer
	m.Claim = true
	if err := p.writeManifest(ctx, &m); err != nil {
		return fmt.Errorf("claiming: %w", err)
	}
	p.claimed = true
	p.m.lastSuccess.Set(float64(m.CreatedAt.UnixNano()) / 1e9)
	p.log.Info("claimed partition checkpoint", "seq", seq, "empty", m.Empty)
	p.afterWrite(ctx)
	if p.fenced {
		return ErrFenced
	}
	return nil
}

// Commit stores cp as the partition's next checkpoint: it uploads the
// generation objects not stored yet (a sealed generation only once; the live
// one every time, or only its log when it continues the chain of the last
// manifest and stays within MaxLogShare), then writes manifest seq+1
// create-only. Until that
// manifest exists nothing of this checkpoint is visible to readers.
//
// Before naming again an object the last manifest names, Commit confirms
// that the store still holds it (one LIST per commit, presence.go); one
// deleted behind its back is uploaded again from cp, logged at error level
// and counted in bloomgate_checkpoint_objects_missing_total.
//
// ErrFenced (errors.Is) means another writer took the sequence or a newer
// one: the caller no longer owns the partition and must stop committing.
// Other errors leave the previous checkpoint in place; Commit may be called
// again (on the same handle) later.
//
// After a successful commit, retention runs (errors are logged, not
// returned): manifests beyond the newest Options.Retain are deleted, and so
// are generation objects no kept manifest names that are older than
// Options.OrphanGrace.
func (p *Partition) Commit(ctx context.Context, cp Checkpoint) (_ *Manifest, err error) {
	start := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	defer func() { p.countFailure(err) }()
	if p.fenced {
		return nil, ErrFenced
	}
	if !p.claimed {
		return nil, errors.New("commit before claim: call Restore and Claim after assignment")
	}
	if err := p.settleUnsure(ctx); err != nil {
		return nil, err
	}
	c := p.newCommit(cp)
	m := c.m
	var uploaded int64
	for i, g := range cp.Generations {
		ref, n, err := c.generation(ctx, i, g)
		if err != nil {
			return nil, err
		}
		uploaded += n
		m.Generations = append(m.Generations, ref)
	}
	if cp.Exact != nil {
		ex, n, err := p.commitExact(ctx, cp.Exact, c.have)
		if err != nil {
			return nil, err
		}
		m.Exact = ex
		uploaded += n
	}
	if err := p.writeManifest(ctx, m); err != nil {
		return nil, err
	}
	p.missing = nil // the manifest names only objects confirmed or uploaded
	p.m.bytes.Add(float64(uploaded))
	p.m.duration.Observe(time.Since(start).Seconds())
	p.m.lastSuccess.Set(float64(time.Now().UnixNano()) / 1e9)
	p.afterWrite(ctx)
	if p.fenced {
		return nil, ErrFenced
	}
	return m, nil
}

// settleUnsure reads back the manifest whose write was not answered: ours
// (its answer was lost), or another writer's (fenced).
func (p *Partition) settleUnsure(ctx context.Context) error {
	u := p.unsure
	if u == nil {
		return nil
	}
	existing, rerr := p.s.readSmall(ctx, manifestKey(p.dir, u.m.Seq))
	switch {
	case rerr != nil:
		return fmt.Errorf("settling manifest %d (exists, not yet read back): %w", u.m.Seq, rerr)
	case bytes.Equal(existing, u.data):
		p.seq, p.last = u.m.Seq, u.m // it was ours; its answer was lost
	default:
		p.fenced = true
		return fmt.Errorf("%w: manifest %d already written by another writer", ErrFenced, u.m.Seq)
	}
	p.unsure = nil
	return nil
}

// commit is one Commit: the manifest being written and what the last one
// stored.
type commit struct {
	p  *Partition
	cp Checkpoint
	m  *Manifest
	// A generation is its ID and its range: after a settings change, a
	// generation of the old plan and one of the new may share an ID (span
	// indexes of different spans).
	stored map[genRange]GenerationRef
	live   map[genRange]GenerationRef // unsealed: chains a log may continue
	prev   map[genRange]GenerationRef // every generation, lost ones included
	names  map[string]bool            // object names taken
	// Objects named again, not uploaded, must still exist (presence.go).
	have *presence
}

func (p *Partition) newCommit(cp Checkpoint) *commit {
	seq := p.seq + 1
	c := &commit{p: p, cp: cp, m: &Manifest{
		Seq:           seq,
		CreatedAt:     p.s.opts.now().UTC(),
		Owner:         cp.Owner,
		Writer:        p.writer,
		Group:         p.group,
		Topic:         p.topic,
		Partition:     p.partition,
		InputOffset:   cp.InputOffset,
		OutputOffsets: cp.OutputOffsets,
		Filter:        cp.Filter,
		Key:           cp.Key,
		HashSeed:      cp.HashSeed,
		Isolation:     cp.Isolation,
		EventTime:     cp.EventTime,
		Seed:          cp.Seed,
		SeedingUntil:  cp.SeedingUntil,

		Provenance:             cp.Provenance,
		LegacyProvenanceBefore: cp.LegacyProvenanceBefore,
		InputMark:              cp.InputMark,
	},
		stored: map[genRange]GenerationRef{}, live: map[genRange]GenerationRef{}, prev: map[genRange]GenerationRef{},
		names: map[string]bool{}, have: &presence{p: p, seq: seq},
	}
	if p.last != nil {
		for _, g := range p.last.Generations {
			r := rangeOf(g.ID, g.Start, g.End)
			c.prev[r] = g
			switch {
			case g.IsLost():
				// Never matched: its stored state is gone, and whatever the
				// generation holds now is uploaded whole.
			case g.Sealed:
				c.stored[r] = g
			default:
				c.live[r] = g
			}
		}
	}
	return c
}

// generation stores generation g (index i) for the manifest: named again
// if sealed and stored unchanged, a log continuing its chain if live, else
// uploaded whole. n is the bytes uploaded.
func (c *commit) generation(ctx context.Context, i int, g Generation) (_ GenerationRef, n int64, err error) {
	p := c.p
	kf := p.keysFrom(g, c.prev, c.cp)
	if ref, ok, err := c.sealedAgain(ctx, g); err != nil || ok {
		ref.KeysFrom = kf
		return ref, 0, err
	}
	if ref, n, ok, err := c.logged(ctx, g); err != nil || ok {
		ref.KeysFrom = kf
		return ref, n, err
	}
	if g.Source == nil {
		return GenerationRef{}, 0, fmt.Errorf("generation %d (index %d): no source and not stored before", g.ID, i)
	}
	seq := c.m.Seq
	rel := p.objectKey(g.ID, seq, "")
	if c.names[rel] {
		rel = p.objectKey(g.ID, seq, fmt.Sprintf("-%d", i))
	}
	c.names[rel] = true
	ref, err := p.upload(ctx, g, rel, seq, p.s.opts.Compression)
	if err != nil {
		return GenerationRef{}, 0, fmt.Errorf("uploading generation %d: %w", g.ID, err)
	}
	ref.KeysFrom = kf
	return ref, ref.Bytes, nil
}

// sealedAgain names a sealed generation's stored objects again if they hold
// the same bits and still exist (ok).
func (c *commit) sealedAgain(ctx context.Context, g Generation) (_ GenerationRef, ok bool, err error) {
	// Only the same bits: after a plan change and back, a generation
	// the other plan listed as sealed (legacy) can rejoin the ring and
	// take inserts again.
	ref, ok := c.stored[rangeOf(g.ID, g.Start, g.End)]
	if !ok || !g.Sealed || ref.Inserts != g.Inserts || ref.Stacks != g.Stacks {
		return GenerationRef{}, false, nil
	}
	gone, err := c.have.missing(ctx, chainObjects(ref))
	if err != nil {
		return GenerationRef{}, false, err
	}
	if len(gone) > 0 {
		c.have.reportMissing(gone, fmt.Sprintf("sealed generation %d is uploaded whole again from memory", g.ID))
		return GenerationRef{}, false, nil
	}
	ref.ExactGen, ref.ExactGens = g.ExactGen, g.ExactGens
	// A sealed table keeps its bytes while its generations leave.
	ref.EstKeys, ref.EstFPR, ref.Ages = g.EstKeys, g.EstFPR, g.Ages
	return ref, true, nil
}

// logged stores a live generation as a log continuing its stored chain, if
// the chain holds the log's start and its objects still exist (ok).
func (c *commit) logged(ctx context.Context, g Generation) (_ GenerationRef, n int64, ok bool, err error) {
	prev, ok := c.live[rangeOf(g.ID, g.Start, g.End)]
	if !ok || g.Sealed || g.Log == nil || !prev.chainHolds(g.Log.After) {
		return GenerationRef{}, 0, false, nil
	}
	// An empty log names the chain as it is; a segment continues
	// it after After, dropping what followed.
	chain := chainObjects(prev)
	if cut, _ := prev.chainCut(g.Log.After); g.Log.Entries > 0 {
		chain = chain[:cut+1]
	}
	gone, err := c.have.missing(ctx, chain)
	if err != nil {
		return GenerationRef{}, 0, false, err
	}
	if len(gone) > 0 {
		c.have.reportMissing(gone, fmt.Sprintf("live generation %d is uploaded whole again from memory (a new log chain starts)", g.ID))
		return GenerationRef{}, 0, false, nil
	}
	ref, n, ok, err := c.p.commitLog(ctx, g, prev, c.m.Seq)
	if err != nil {
		return GenerationRef{}, 0, false, fmt.Errorf("uploading log of generation %d: %w", g.ID, err)
	}
	return ref, n, ok, nil
}

// writeManifest writes m create-only under its sequence and records it as
// this handle's last manifest.
func (p *Partition) writeManifest(ctx context.Context, m *Manifest) error {
	data, err := encodeManifest(m)
	if err != nil {
		return err
	}
	key := manifestKey(p.dir, m.Seq)
	_, err = p.s.bkt.Put(ctx, key, bytes.NewReader(data), true)
	if errors.Is(err, errExists) {
		// Either another writer won the sequence, or an earlier attempt of
		// this very write succeeded and only its answer was lost (5xx after
		// the write, dropped connection): the Writer nonce and timestamp
		// make our bytes unique, so equal bytes mean it is ours.
		existing, rerr := p.s.readSmall(ctx, key)
		switch {
		case rerr != nil:
			// Unknown whose manifest it is: not a fence (that would make
			// the worker give up the partition and the group rebalance).
			// The next Commit reads it again before going on.
			p.unsure = &unsureManifest{m: m, data: data}
			return fmt.Errorf("writing manifest %d: it exists and reading it back failed: %w", m.Seq, rerr)
		case bytes.Equal(existing, data):
			err = nil
		default:
			p.fenced = true
			return fmt.Errorf("%w: manifest %d already written by another writer", ErrFenced, m.Seq)
		}
	}
	if err != nil {
		return fmt.Errorf("writing manifest %d: %w", m.Seq, err)
	}
	p.m.bytes.Add(float64(len(data)))
	p.seq = m.Seq
	p.last = m
	return nil
}

// afterWrite checks that no newer manifest exists (a writer far behind could
// otherwise recreate a sequence that retention already deleted: retention
// never deletes the newest manifests, so a newer one is then always listed)
// and runs retention. Listing errors are logged: the manifest is written.
func (p *Partition) afterWrite(ctx context.Context) {
	objs, err := p.s.list(ctx, p.dir+"/")
	if err != nil {
		p.log.Warn("listing after checkpoint failed; retention skipped", "err", err)
		return
	}
	for _, o := range objs {
		if seq, ok := parseManifestKey(p.dir, o.Key); ok && seq > p.seq {
			p.fenced = true
			p.log.Warn("newer checkpoint by another writer found; this writer is fenced", "seq", p.seq, "newer", seq)
			// Our manifest is older than the head: readers ignore it, and
			// retention of the new owner removes it.
			return
		}
	}
	if err := p.collect(ctx, objs); err != nil && !errors.Is(err, context.Canceled) {
		p.log.Warn("checkpoint retention failed", "err", err)
	}
}

// keysFrom is where g's keys begin in the input (GenerationRef.KeysFrom):
// a generation of the last manifest keeps its recorded position; a new one
// gets cp's, the position of the last state without it. A generation lost
// at the restore without a recorded position was opened empty there, so
// cp's position (the restore's, until a commit succeeds) bounds it too.
//
// A generation that rejoins the ring after a plan change and back (a
// legacy generation of the last manifest, a ring generation now) loses
// its position: while it was legacy, records were filed under the other
// plan's spans, which a rebuild by this plan's spans cannot follow.
func (p *Partition) keysFrom(g Generation, prev map[genRange]GenerationRef, cp Checkpoint) *KeysFrom {
	ref, ok := prev[rangeOf(g.ID, g.Start, g.End)]
	switch {
	case !ok:
		return cp.KeysFrom
	case ref.KeysFrom == nil && ref.IsLost():
		return cp.KeysFrom
	case ref.KeysFrom == nil:
		return nil
	}
	span := g.End.Sub(g.Start)
	if planSpan(p.last.Filter) != span && planSpan(cp.Filter) == span {
		return nil
	}
	return ref.KeysFrom
}

// planSpan is the event time one generation of plan f covers, as the
// filter plans it (⌈window / (generations − 1)⌉); 0 for a plan without
// generations.
func planSpan(f FilterParams) time.Duration {
	if f.Generations < 2 {
		return 0
	}
	g := time.Duration(f.Generations - 1)
	return (f.Window + g - 1) / g
}

// genRange identifies a generation: its ID and its event-time range.
type genRange struct {
	id         uint64
	start, end int64
}

func rangeOf(id uint64, start, end time.Time) genRange {
	return genRange{id, start.UnixNano(), end.UnixNano()}
}

// objectKey names a generation object uploaded for manifest seq, relative
// to the partition's directory; suffix tells apart two generations of one
// commit with the same ID.
func (p *Partition) objectKey(id, seq uint64, suffix string) string {
	return fmt.Sprintf("gens/%020d-%020d-%s%s.gen", id, seq, p.writer, suffix)
}

// commitExact uploads the exact store's files that the handle's last
// manifest does not list (same name, size and digest), or lists but the
// store no longer holds (have), and returns the manifest's exact section
// and the bytes uploaded. Objects are named by
// their digest, so a file uploaded again (by a new owner, or after a
// failed commit) lands on the same object with the same bytes.
func (p *Partition) commitExact(ctx context.Context, ec *ExactCheckpoint, have *presence) (*ExactState, int64, error) {
	seq := have.seq
	type desc struct {
		name string
		size int64
		sum  string
	}
	stored := map[desc]ExactFile{}
	if p.last != nil && p.last.Exact != nil {
		for _, f := range p.last.Exact.Files {
			stored[desc{f.Name, f.Size, f.SHA256}] = f
		}
	}
	ex := &ExactState{Layout: ec.Layout, Floor: ec.Floor, NextGen: ec.NextGen, Keys: ec.Keys, Files: make([]ExactFile, 0, len(ec.Files))}
	done := map[string]uint64{} // objects uploaded by this commit
	var uploaded int64
	for _, f := range ec.Files {
		if ref, ok := stored[desc{f.Name, f.Size, f.SHA256}]; ok {
			gone, err := have.missing(ctx, []storedObject{{ref.Key, ref.Size}})
			if err != nil {
				return nil, 0, err
			}
			if len(gone) == 0 {
				ex.Files = append(ex.Files, ref)
				continue
			}
			have.reportMissing(gone, fmt.Sprintf("exact store file %s is uploaded again from the local exact store", f.Name))
		}
		if len(f.SHA256) != 64 || strings.Trim(f.SHA256, "0123456789abcdef") != "" {
			return nil, 0, fmt.Errorf("exact store file %s: digest %q is not 64 lower-case hex digits", f.Name, f.SHA256)
		}
		ref := ExactFile{Name: f.Name, Size: f.Size, SHA256: f.SHA256, Key: exactDir + f.SHA256, Seq: seq}
		if s, ok := done[ref.Key]; ok {
			ref.Seq = s
			ex.Files = append(ex.Files, ref)
			continue
		}
		if f.Open == nil {
			return nil, 0, fmt.Errorf("exact store file %s: no source and not stored before", f.Name)
		}
		g, err := p.upload(ctx, Generation{Source: fileSource(f.Open)}, ref.Key, seq, encodingNone)
		if err != nil {
			return nil, 0, fmt.Errorf("uploading exact store file %s: %w", f.Name, err)
		}
		if g.Bytes != f.Size || g.SHA256 != f.SHA256 {
			return nil, 0, fmt.Errorf("uploading exact store file %s: read %d bytes with sha256 %s, described as %d bytes with %s",
				f.Name, g.Bytes, g.SHA256, f.Size, f.SHA256)
		}
		done[ref.Key] = seq
		uploaded += g.Bytes
		ex.Files = append(ex.Files, ref)
	}
	return ex, uploaded, nil
}

// chainHolds reports whether key names g's object or one of its segments.
func (g GenerationRef) chainHolds(key string) bool {
	_, ok := g.chainCut(key)
	return ok
}

// chainCut is the number of g's segments up to the object named key (0:
// its base).
func (g GenerationRef) chainCut(key string) (int, bool) {
	if key == g.Key {
		return 0, true
	}
	for i, l := range g.Log {
		if l.Key == key {
			return i + 1, true
		}
	}
	return 0, false
}

// commitLog continues prev, the generation's chain in the last manifest,
// with g.Log after the object it names (the segments after that object
// are dropped from the chain: the log holds what they added): nothing to
// upload if the log is empty, else one segment under logs/<sha256>, if
// the chain then stays within MaxLogShare of its base, MaxLogEntries and
// MaxLogSegments. ok is false when it would not (the generation is then
// stored whole); n is the bytes uploaded.
func (p *Partition) commitLog(ctx context.Context, g Generation, prev GenerationRef, seq uint64) (_ GenerationRef, n int64, ok bool, err error) {
	ref := prev
	ref.Inserts, ref.EstKeys, ref.Fill, ref.EstFPR, ref.Stacks, ref.ExactGen = g.Inserts, g.EstKeys, g.Fill, g.EstFPR, g.Stacks, g.ExactGen
	ref.Capacity, ref.FPR, ref.Ages, ref.ExactGens = g.Capacity, g.FPR, g.Ages, g.ExactGens
	if g.Log.Entries == 0 {
		return ref, 0, true, nil // the chain as it is holds the state
	}
	cut, _ := prev.chainCut(g.Log.After)
	prev.Log = prev.Log[:cut:cut]
	sha := sha256.New()
	size, err := g.Log.Source.WriteTo(sha)
	if err != nil {
		return GenerationRef{}, 0, false, fmt.Errorf("digesting log segment: %w", err)
	}
	share := MaxLogShare
	if g.LogShare > 0 {
		share = g.LogShare
	}
	if float64(prev.LogBytes()+size) > share*float64(prev.Bytes) || prev.LogEntries()+g.Log.Entries > MaxLogEntries ||
		len(prev.Log) >= MaxLogSegments {
		return GenerationRef{}, 0, false, nil
	}
	sum := hex.EncodeToString(sha.Sum(nil))
	up, err := p.upload(ctx, Generation{Source: g.Log.Source}, logsDir+sum, seq, encodingNone)
	if err != nil {
		return GenerationRef{}, 0, false, err
	}
	if up.Bytes != size || up.SHA256 != sum {
		return GenerationRef{}, 0, false, fmt.Errorf("log segment read %d bytes with sha256 %s, then %d bytes with %s: its source is not stable",
			size, sum, up.Bytes, up.SHA256)
	}
	ref.Log = append(slices.Clip(prev.Log), LogRef{Key: up.Key, Bytes: up.Bytes, SHA256: up.SHA256, Entries: g.Log.Entries, Seq: seq})
	return ref, up.Bytes, true, nil
}

// fileSource streams what open returns.
type fileSource func() (io.ReadCloser, error)

func (open fileSource) WriteTo(w io.Writer) (int64, error) {
	rc, err := open()
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	return io.Copy(w, rc)
}

// upload streams one generation into the new object rel (relative to the
// partition's directory), encoded with enc, and returns its ref.
func (p *Partition) upload(ctx context.Context, g Generation, rel string, seq uint64, enc string) (GenerationRef, error) {
	crc := crc32.New(castagnoli)
	sha := sha256.New()
	counted := &countingWriter{}
	pr, pw := io.Pipe()
	counted.w = io.MultiWriter(pw, crc, sha)

	type result struct {
		raw int64
		err error
	}
	done := make(chan result, 1)
	go func() {
		raw, err := writeEncoded(counted, enc, g.Source)
		pw.CloseWithError(err) // nil: the reader sees EOF
		done <- result{raw, err}
	}()
	n, err := p.s.bkt.Put(ctx, p.dir+"/"+rel, pr, false)
	pr.CloseWithError(errUploadEnded) // unblocks the writer if Put stopped early
	res := <-done
	if err != nil {
		return GenerationRef{}, err
	}
	if res.err != nil {
		return GenerationRef{}, fmt.Errorf("writing generation: %w", res.err)
	}
	if n != counted.n {
		return GenerationRef{}, fmt.Errorf("stored %d bytes, source produced %d", n, counted.n)
	}
	return GenerationRef{
		ID: g.ID, Sealed: g.Sealed, Start: g.Start.UTC(), End: g.End.UTC(), Inserts: g.Inserts,
		EstKeys: g.EstKeys, Fill: g.Fill, EstFPR: g.EstFPR, Stacks: g.Stacks, ExactGen: g.ExactGen,
		Capacity: g.Capacity, FPR: g.FPR, Ages: g.Ages, ExactGens: g.ExactGens,
		Key: rel, Encoding: enc, Bytes: n, RawBytes: res.raw,
		CRC32C: hex.EncodeToString(crc.Sum(nil)), SHA256: hex.EncodeToString(sha.Sum(nil)), Seq: seq,
	}, nil
}

var errUploadEnded = errors.New("upload ended")

func writeEncoded(w io.Writer, encoding string, src GenerationSource) (int64, error) {
	if encoding == encodingNone {
		return src.WriteTo(w)
	}
	zw, err := zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderCRC(false))
	if err != nil {
		return 0, err
	}
	raw, err := src.WriteTo(zw)
	if err != nil {
		zw.Close()
		return raw, err
	}
	return raw, zw.Close()
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

func (p *Partition) countFailure(err error) {
	switch {
	case err == nil, errors.Is(err, context.Canceled):
	case errors.Is(err, ErrFenced):
		p.m.fenced.Inc()
	default:
		p.m.failures.Inc()
	}
}

// list lists with retries.
func (s *Store) list(ctx context.Context, prefix string) ([]objectAttrs, error) {
	var objs []objectAttrs
	err := s.retry.do(ctx, func(ctx context.Context) error {
		objs = objs[:0]
		return s.bkt.List(ctx, prefix, func(a objectAttrs) error {
			objs = append(objs, a)
			return nil
		})
	})
	return objs, err
}

func (p *Partition) listManifestsRetry(ctx context.Context) ([]uint64, error) {
	objs, err := p.s.list(ctx, p.dir+"/manifests/")
	if err != nil {
		return nil, fmt.Errorf("listing manifests: %w", err)
	}
	var seqs []uint64
	for _, o := range objs {
		if seq, ok := parseManifestKey(p.dir, o.Key); ok {
			seqs = append(seqs, seq)
		}
	}
	slices.Sort(seqs)
	return seqs, nil
}
