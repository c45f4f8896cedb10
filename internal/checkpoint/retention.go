package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// collect applies retention to the partition, given a listing of its
// directory: it keeps the newest Options.Retain manifests and every object
// they name, deletes older manifests, and deletes generation objects, log
// segments and exact store files that no kept manifest names once they are
// older than Options.OrphanGrace.
//
// The grace period is what protects a concurrent writer: its fresh uploads
// are not named by any manifest until its own manifest lands. If a kept
// manifest cannot be read, no generation object is deleted this time (what
// it names is unknown).
func (p *Partition) collect(ctx context.Context, objs []objectAttrs) error {
	var seqs []uint64
	var gens []objectAttrs
	for _, o := range objs {
		if seq, ok := parseManifestKey(p.dir, o.Key); ok {
			seqs = append(seqs, seq)
		} else if slices.ContainsFunc(objectDirs, func(d string) bool { return strings.HasPrefix(o.Key, p.dir+"/"+d) }) {
			gens = append(gens, o)
		}
	}
	slices.Sort(seqs)
	retain := p.s.opts.Retain
	cut := max(len(seqs)-retain, 0)
	old, kept := seqs[:cut], seqs[cut:]

	referenced := map[string]bool{}
	known := true
	for _, seq := range kept {
		m, err := p.cachedManifest(ctx, seq)
		if err != nil {
			if errors.Is(err, ErrCorrupt) {
				known = false
				continue
			}
			return fmt.Errorf("reading kept manifest: %w", err)
		}
		for _, g := range m.Generations {
			referenced[p.dir+"/"+g.Key] = true
			for _, l := range g.Log {
				referenced[p.dir+"/"+l.Key] = true
			}
		}
		if m.Exact != nil {
			for _, f := range m.Exact.Files {
				referenced[p.dir+"/"+f.Key] = true
			}
		}
	}
	var deleted int
	for _, seq := range old { // oldest first
		if err := p.s.delete(ctx, manifestKey(p.dir, seq)); err != nil {
			return err
		}
		delete(p.cache, seq)
		deleted++
	}
	if known {
		horizon := p.s.opts.now().Add(-p.s.opts.OrphanGrace)
		for _, o := range gens {
			if referenced[o.Key] || !o.Modified.Before(horizon) {
				continue
			}
			if contentAddressed(p.dir, o.Key) {
				// Another writer may have uploaded the same content again
				// since the listing (a sealed run or a segment rebuilt by
				// a replay) and named it in a manifest this listing
				// predates: delete only what is still old. This narrows
				// the race to the time between these two requests.
				now, err := p.s.bkt.Attributes(ctx, o.Key)
				if err != nil || !now.Modified.Before(horizon) {
					continue // gone, fresh, or unknown: the next run decides
				}
			}
			if err := p.s.delete(ctx, o.Key); err != nil {
				return err
			}
			deleted++
		}
	}
	p.m.deleted.Add(float64(deleted))
	if deleted > 0 {
		p.log.Debug("checkpoint retention", "deleted", deleted, "kept_manifests", len(kept))
	}
	return nil
}

// cachedManifest reads a manifest once per handle: manifests are immutable.
func (p *Partition) cachedManifest(ctx context.Context, seq uint64) (*Manifest, error) {
	if m, ok := p.cache[seq]; ok {
		return m, nil
	}
	if p.last != nil && p.last.Seq == seq {
		return p.last, nil
	}
	m, err := p.readManifest(ctx, seq)
	if err != nil {
		return nil, err
	}
	if p.cache == nil {
		p.cache = map[uint64]*Manifest{}
	}
	p.cache[seq] = m
	return m, nil
}

func (s *Store) delete(ctx context.Context, key string) error {
	err := s.retry.do(ctx, func(ctx context.Context) error { return s.bkt.Delete(ctx, key) })
	if err != nil {
		return fmt.Errorf("deleting %s: %w", key, err)
	}
	return nil
}

// contentAddressed reports whether key (in the partition directory dir) is
// named by its content (exact store files and log segments): any writer
// may upload it again under the same key.
func contentAddressed(dir, key string) bool {
	return strings.HasPrefix(key, dir+"/"+exactDir) || strings.HasPrefix(key, dir+"/"+logsDir)
}
