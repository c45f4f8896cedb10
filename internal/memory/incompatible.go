package memory

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/bloomgate/bloomgate/internal/checkpoint"
	"github.com/bloomgate/bloomgate/internal/worker"
)

// IncompatibleError is a memory the settings cannot restore: its
// checkpoints were written with another definition of a key (--key,
// --normalize, --url-rules, --url-strip-params, the hash) or another filter kind (--filter). It is a
// configuration error: waiting or retrying does not help, and carrying
// the memory over would let duplicates pass for up to a window.
//
// It is the one source of the words for this case: the restore's refusal
// of one partition, the start's refusal of every partition at once
// (Store.CheckMemory), and `bloomgate check`'s checkpoints row (Finding,
// Fix). It matches checkpoint.ErrIncompatible, worker.ErrIncompatible and
// worker.ErrNoUsableCheckpoint with errors.Is.
type IncompatibleError struct {
	Group, Topic string
	Partitions   []int // ascending
	// RecordedKey and CurrentKey: what the checkpoints and the settings
	// define a key as; RecordedKind and CurrentKind: the filter kinds
	// (KindRing, KindFingerprint). Only what differs is reported, the
	// kind first.
	RecordedKey, CurrentKey   checkpoint.KeyIdentity
	RecordedKind, CurrentKind string
}

func (e *IncompatibleError) kindChanged() bool { return e.RecordedKind != e.CurrentKind }

// Finding says which partitions were written with what, against what the
// settings make, and what carrying them over would do.
func (e *IncompatibleError) Finding() string {
	ps, holds, was := "partition "+worker.PartitionList(e.Partitions), "holds", "was"
	if len(e.Partitions) > 1 {
		ps, holds, was = "partitions "+worker.PartitionList(e.Partitions), "hold", "were"
	}
	if e.kindChanged() {
		return fmt.Sprintf("%s %s a %s filter (--filter %s); these settings make --filter %s: the stored %s cannot be read as the other kind, "+
			"and a new filter would forget the window's keys",
			ps, holds, e.RecordedKind, e.RecordedKind, e.CurrentKind, objectsName(manifestKind(e.RecordedKind)))
	}
	rec, cur := keyFlagsAgainst(e.RecordedKey, e.CurrentKey), keyFlagsAgainst(e.CurrentKey, e.RecordedKey)
	if e.RecordedKey.Hash != e.CurrentKey.Hash {
		rec += " (hash " + e.RecordedKey.Hash + ")"
		cur += " (hash " + e.CurrentKey.Hash + ")"
	}
	return fmt.Sprintf("%s %s written with %s; these settings make %s: the stored keys match none of the new ones, "+
		"and duplicates would pass for up to a window", ps, was, rec, cur)
}

// Fix names the ways out.
func (e *IncompatibleError) Fix() string {
	keep := "keep the key settings as recorded (" + keyFlagsAgainst(e.RecordedKey, e.CurrentKey) + ")"
	if e.kindChanged() {
		keep = "keep --filter " + e.RecordedKind
	} else if e.RecordedKey.Hash != e.CurrentKey.Hash {
		keep = "run the version that wrote them (hash " + e.RecordedKey.Hash + ")"
	}
	return keep + ", or start a new memory: a new --group, or --on-restore-failure empty once (rebuilt from the retained input)"
}

func (e *IncompatibleError) Error() string {
	return fmt.Sprintf("checkpoints of group %s, topic %s refused: %s. Fix: %s", e.Group, e.Topic, e.Finding(), e.Fix())
}

func (e *IncompatibleError) Is(target error) bool {
	return target == checkpoint.ErrIncompatible || target == worker.ErrIncompatible || target == worker.ErrNoUsableCheckpoint
}

// KeyFlags writes a key definition as the flags that make it:
// "--key json:id --normalize none" ("--repartition --key …" for the
// dedup stage behind the repartition hop).
func KeyFlags(k checkpoint.KeyIdentity) string {
	spec, pre := k.Spec, ""
	if s, ok := strings.CutPrefix(spec, "repartition("); ok && strings.HasSuffix(s, ")") {
		spec, pre = strings.TrimSuffix(s, ")"), "--repartition "
	}
	s := fmt.Sprintf("%s--key %s --normalize %s", pre, spec, k.Normalize)
	if k.URLRules != "" {
		s += " --url-rules " + k.URLRules
	}
	if k.URLStripParams != "" {
		s += " --url-strip-params " + k.URLStripParams
	}
	return s
}

// keyFlagsAgainst is KeyFlags(k), saying which URL settings k lacks that
// other has, so that a rule turned on or off is visible on both sides.
func keyFlagsAgainst(k, other checkpoint.KeyIdentity) string {
	s := KeyFlags(k)
	var without []string
	if k.URLRules == "" && other.URLRules != "" {
		without = append(without, "--url-rules")
	}
	if k.URLStripParams == "" && other.URLStripParams != "" {
		without = append(without, "--url-strip-params")
	}
	if len(without) > 0 {
		s += ", without " + strings.Join(without, " and ")
	}
	return s
}

// compatible returns nil if the settings can restore checkpoint m, else
// an *IncompatibleError naming m's partition. Filter plan changes
// (window, generations, capacity, rate) are carried over: see
// bloom.RestoreShard.
func (s *Store) compatible(m *checkpoint.Manifest) error {
	e := &IncompatibleError{Group: s.group, Topic: m.Topic, Partitions: []int{m.Partition},
		RecordedKind: kindName(m.Filter.Kind), CurrentKind: kindName(manifestKind(s.Kind)), CurrentKey: s.Key}
	if m.Key != nil {
		e.RecordedKey = *m.Key
	}
	if e.kindChanged() || (m.Key != nil && s.Key != (checkpoint.KeyIdentity{}) && *m.Key != s.Key) {
		return e
	}
	return nil
}

// CheckMemory reads the newest checkpoint of each of the topic's
// partitions (manifests only, as a preflight does) and returns one
// *IncompatibleError naming every partition the settings cannot restore,
// described by the first of them; nil if there is none. A manifest that
// cannot be read is left to the restore (which retries and reports it).
// It implements worker.MemoryChecker.
func (s *Store) CheckMemory(ctx context.Context, topic string, partitions int) error {
	var first *IncompatibleError
	for p := range partitions {
		m, _, err := s.store.Partition(s.group, topic, p).Newest(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			continue
		}
		var e *IncompatibleError
		if !errors.As(s.compatible(m), &e) {
			continue
		}
		if first == nil {
			first = e
		} else {
			first.Partitions = append(first.Partitions, p)
		}
	}
	if first == nil {
		return nil
	}
	slices.Sort(first.Partitions)
	return first
}
