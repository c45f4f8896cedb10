package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// ErrEmptyLocation is returned by Inspect when the location holds no
// checkpoints at all.
var ErrEmptyLocation = errors.New("no checkpoints at this location")

// Report describes every partition checkpointed at a location. It is data
// only: its JSON encoding is what `bloomgate inspect --json` prints, and the
// command renders the text form from it.
type Report struct {
	URL         string            `json:"url"`
	GeneratedAt time.Time         `json:"generated_at"`
	Partitions  []PartitionReport `json:"partitions"`
}

// PartitionReport is the newest checkpoint of one partition.
type PartitionReport struct {
	Group     string `json:"group"`
	Topic     string `json:"topic"`
	Partition int    `json:"partition"`

	Seq       uint64        `json:"seq"`
	Manifests int           `json:"manifests"` // manifests stored (retention keeps a few)
	CreatedAt time.Time     `json:"created_at"`
	Age       time.Duration `json:"age_ns"`
	AgeText   string        `json:"age"`
	Owner     string        `json:"owner"`
	Claim     bool          `json:"claim,omitempty"`
	Empty     bool          `json:"empty,omitempty"`

	InputOffset   int64                    `json:"input_offset"`
	OutputOffsets map[string]map[int]int64 `json:"output_offsets,omitempty"`
	Filter        FilterParams             `json:"filter"`
	Key           *KeyIdentity             `json:"key,omitempty"`
	KeyedHash     bool                     `json:"keyed_hash"` // the seed itself is not shown
	Generations   []GenerationRef          `json:"generations"`
	// EstFPR combines the generations' estimated rates: 1-Π(1-p_i).
	EstFPR  float64 `json:"estimated_fpr"`
	EstKeys uint64  `json:"estimated_keys"`
	// Exact is the newest manifest's exact store (nil: filter only):
	// its files, keys and generations; ExactBytes is the size of its files.
	Exact      *ExactState `json:"exact,omitempty"`
	ExactBytes int64       `json:"exact_bytes,omitempty"`
	// Bytes is what the newest manifest references (generations and exact
	// store files); StoredBytes is everything under the partition (older
	// manifests, orphans included).
	Bytes       int64 `json:"bytes"`
	StoredBytes int64 `json:"stored_bytes"`
	Objects     int   `json:"objects"`
	// Error is set when the newest manifest cannot be read or verified.
	Error string `json:"error,omitempty"`
}

// Inspect lists every (group, topic, partition) checkpointed in s with its
// newest manifest. An unreachable location is an error naming it; a
// reachable but empty one is ErrEmptyLocation.
func Inspect(ctx context.Context, s *Store) (*Report, error) {
	objs, err := s.list(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("inspecting %s: %w", s.url, err)
	}
	type part struct {
		dir         string
		group       string
		topic       string
		partition   int
		seqs        []uint64
		storedBytes int64
		objects     int
	}
	parts := map[string]*part{}
	for _, o := range objs {
		// <group>/<topic>/<partition>/(manifests|gens|exact|logs)/<name>
		f := strings.Split(o.Key, "/")
		if len(f) != 5 || (f[3] != "manifests" && !slices.Contains(objectDirs, f[3]+"/")) {
			continue
		}
		n, err := strconv.Atoi(f[2])
		if err != nil || n < 0 {
			continue
		}
		g, err1 := unescapeName(f[0])
		t, err2 := unescapeName(f[1])
		if err1 != nil || err2 != nil {
			continue
		}
		dir := strings.Join(f[:3], "/")
		pt := parts[dir]
		if pt == nil {
			pt = &part{dir: dir, group: g, topic: t, partition: n}
			parts[dir] = pt
		}
		pt.storedBytes += o.Size
		pt.objects++
		if seq, ok := parseManifestKey(dir, o.Key); ok {
			pt.seqs = append(pt.seqs, seq)
		}
	}
	rep := &Report{URL: s.url, GeneratedAt: s.opts.now().UTC()}
	for _, pt := range parts {
		if len(pt.seqs) == 0 {
			continue // only orphans
		}
		sort.Slice(pt.seqs, func(i, j int) bool { return pt.seqs[i] < pt.seqs[j] })
		pr := PartitionReport{
			Group: pt.group, Topic: pt.topic, Partition: pt.partition,
			Seq: pt.seqs[len(pt.seqs)-1], Manifests: len(pt.seqs),
			StoredBytes: pt.storedBytes, Objects: pt.objects,
		}
		p := s.Partition(pt.group, pt.topic, pt.partition)
		m, err := p.readManifest(ctx, pr.Seq)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				return nil, fmt.Errorf("inspecting %s: %w", s.url, err)
			}
			pr.Error = err.Error()
		} else {
			pr.CreatedAt = m.CreatedAt
			pr.Age = rep.GeneratedAt.Sub(m.CreatedAt).Round(time.Second)
			pr.AgeText = pr.Age.String()
			pr.Owner, pr.Claim, pr.Empty = m.Owner, m.Claim, m.Empty
			pr.InputOffset, pr.OutputOffsets, pr.Filter = m.InputOffset, m.OutputOffsets, m.Filter
			pr.Key, pr.KeyedHash = m.Key, m.HashSeed != ""
			pr.Generations = m.Generations
			pr.Bytes = m.Bytes()
			if m.Exact != nil {
				pr.Exact, pr.ExactBytes = m.Exact, m.Exact.Bytes()
			}
			miss := 1.0
			for _, g := range m.Generations {
				miss *= 1 - g.EstFPR
				pr.EstKeys += g.EstKeys
			}
			pr.EstFPR = 1 - miss
		}
		rep.Partitions = append(rep.Partitions, pr)
	}
	if len(rep.Partitions) == 0 {
		return nil, fmt.Errorf("inspecting %s: %w", s.url, ErrEmptyLocation)
	}
	sort.Slice(rep.Partitions, func(i, j int) bool {
		a, b := rep.Partitions[i], rep.Partitions[j]
		if a.Group != b.Group {
			return a.Group < b.Group
		}
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		return a.Partition < b.Partition
	})
	return rep, nil
}
