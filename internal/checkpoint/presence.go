package checkpoint

import (
	"context"
	"fmt"
	"strings"
)

// Objects deleted behind the writer's back.
//
// A commit names again, without uploading them, objects an earlier commit
// stored: a sealed generation's object (uploaded once for its whole
// life), the base and segments of a live generation's log chain, the
// exact store's files. Nothing but the owner's retention should delete
// them, but a bucket lifecycle rule ("expire objects after 30 days"
// expires a base that every later manifest still names), a manual
// clean-up or another tool can. Every manifest written after that would
// name an object that is gone: no manifest of the partition loads whole,
// and the next restore loses the generation (Partial restore: it is
// rebuilt from the input only while the input's retention still holds
// its records).
//
// So a commit that names such objects first confirms that the store still
// holds them, at the size the last manifest names (a LIST shows sizes;
// other content at the same size is found only by a restore, which
// verifies digests): one LIST of the partition's directory per commit,
// made the first time the commit is about to name one, never for a commit
// that names none (the first one, or one that uploads everything whole).
// An object found missing is uploaded again from what the caller handed
// to Commit — the filter's memory and the exact store's local files,
// which hold the same state: a sealed generation whole, a live generation
// whole instead of a segment of the broken chain (the memory's journal
// then continues from the new base), an exact store file under its
// digest — logged at error level once and counted in
// bloomgate_checkpoint_objects_missing_total. An object the new manifest
// no longer names (a generation that left the window, segments a merge
// replaces) is not looked for; objects this commit uploads are not
// checked.
//
// Why one LIST and not a HEAD per object: a steady commit names many
// objects again — every sealed generation (up to generations − 1), a
// chain of up to MaxLogSegments segments, the exact store's files — and
// one LIST answers for up to 1,000 keys (the directory holds the kept
// manifests, what they name and young orphans: usually far fewer), so the
// check is one request whatever the chain's length. On S3 a LIST is
// priced like a PUT, about 0.22 USD per partition and month at the
// default one-minute interval, next to the two PUTs and one LIST a commit
// already makes; a HEAD costs a twelfth of that, so HEADs would pay only
// below a dozen objects, at one round trip each. On file:// the LIST
// walks the directory: 0.3–0.4 ms for 79 objects named again
// (BenchmarkPresenceCheck), about twice what 79 stats take, against the
// 4 ms of a commit's writes and syncs, so one way for every store; on
// mem:// it scans a map (~20 µs). The LIST after the manifest
// (afterWrite) cannot serve: it is a whole interval old by the next
// commit, and fencing needs it after the manifest.
//
// An object deleted between this LIST and the manifest's write is found
// at the next commit. A LIST that fails fails the commit (the previous
// checkpoint stays; the next commit tries again), as an upload would. A
// LIST that shows a manifest newer than this writer's fences it at once
// (ErrFenced, before any upload), as the LIST after the manifest would:
// objects missing then may have been deleted by the new owner's
// retention, and are not reported.

// presence answers, for one commit, whether objects named by the handle's
// last manifest are still stored as it names them. It lists the
// partition's directory at most once, on first use.
type presence struct {
	p      *Partition
	seq    uint64           // the manifest being committed
	stored map[string]int64 // relative key -> size; nil until listed
}

// storedObject is an object a manifest names: its key relative to the
// partition's directory and its stored size.
type storedObject struct {
	key  string
	size int64
}

// absentObject is a stored object the store does not hold as named: why
// says what it holds instead.
type absentObject struct {
	storedObject
	why string
}

// chainObjects are the objects holding g: its object and its log
// segments (none for a lost generation).
func chainObjects(g GenerationRef) []storedObject {
	if g.IsLost() {
		return nil
	}
	objs := make([]storedObject, 0, 1+len(g.Log))
	objs = append(objs, storedObject{g.Key, g.Bytes})
	for _, l := range g.Log {
		objs = append(objs, storedObject{l.Key, l.Bytes})
	}
	return objs
}

// missing returns the objects of objs that the store does not hold, or
// holds with another size (truncated or replaced: a LIST shows the size
// for free; a change of content at the same size is found only by a
// restore, which verifies digests).
func (c *presence) missing(ctx context.Context, objs []storedObject) ([]absentObject, error) {
	if len(objs) == 0 {
		return nil, nil
	}
	if c.stored == nil {
		listed, err := c.p.s.list(ctx, c.p.dir+"/")
		if err != nil {
			return nil, fmt.Errorf("confirming that the objects of manifest %d are still stored: %w", c.p.last.Seq, err)
		}
		c.stored = make(map[string]int64, len(listed))
		for _, o := range listed {
			// A newer manifest is another writer's (as in afterWrite):
			// this one is fenced, and what it finds missing may be that
			// writer's retention at work, nothing to report or upload.
			if seq, ok := parseManifestKey(c.p.dir, o.Key); ok && seq > c.p.seq {
				c.p.fenced = true
				return nil, fmt.Errorf("%w: manifest %d exists, newer than this writer's %d", ErrFenced, seq, c.p.seq)
			}
			if k, ok := strings.CutPrefix(o.Key, c.p.dir+"/"); ok {
				c.stored[k] = o.Size
			}
		}
	}
	var gone []absentObject
	for _, o := range objs {
		size, ok := c.stored[o.key]
		switch {
		case !ok:
			gone = append(gone, absentObject{o, "is missing from the store"})
		case size != o.size:
			gone = append(gone, absentObject{o, fmt.Sprintf("holds %d bytes in the store, not %d", size, o.size)})
		}
	}
	return gone, nil
}

// reportMissing logs and counts objects found missing, each once per
// handle until a commit succeeds: a commit that fails after finding them
// (its upload fails) finds them again at the next attempt. action says
// what the commit does instead of naming them.
func (c *presence) reportMissing(gone []absentObject, action string) {
	p := c.p
	for _, o := range gone {
		if p.missing[o.key] {
			continue
		}
		if p.missing == nil {
			p.missing = map[string]bool{}
		}
		p.missing[o.key] = true
		p.m.missing.Inc()
		key := p.dir + "/" + o.key
		p.log.Error(fmt.Sprintf("checkpoint object %s of partition %s/%d, named by manifest %d, %s "+
			"(deleted or changed by something other than this worker's retention: a bucket lifecycle rule, a manual delete?); "+
			"%s, so that checkpoint %d is complete", key, p.topic, p.partition, p.last.Seq, o.why, action, c.seq),
			"object", key, "named_by_seq", p.last.Seq, "seq", c.seq)
	}
}
