// Package deploy checks the deployment files under deployments/ and the
// compose stack against the binary: manifests parse and carry what the
// worker needs, the memory requests cover the filter's planned size, and
// every metric named in the dashboard and the alert rules is one a running
// worker exports.
package deploy

import (
	"fmt"
	"time"

	"github.com/bloomgate/bloomgate/internal/bloom"
)

// BaselineBytes is the memory of a worker besides its filters: Go runtime,
// fetch and produce buffers, checkpoint upload parts.
const BaselineBytes = 128 << 20

// Sizing is the planned filter memory of one partition.
type Sizing struct {
	Config bloom.Config
	// Bytes is the memory of the bits of a full ring (G generations).
	Bytes uint64
	// GenerationBytes is one generation: the most a checkpoint can add
	// while it runs (copy-on-write of the newest generation's pages).
	GenerationBytes uint64
	// BitsPerKey is Bytes·8 over the keys a window holds (Capacity).
	BitsPerKey float64
}

// PartitionSizing builds a shard for cfg, opens all G generations (one key
// per span) and reads the memory the filter itself reports.
func PartitionSizing(cfg bloom.Config) (Sizing, error) {
	s, err := bloom.NewShard(cfg)
	if err != nil {
		return Sizing{}, fmt.Errorf("sizing %+v: %w", cfg, err)
	}
	span := s.Span()
	base := time.Unix(0, 0).Add(1000 * span)
	for i := range cfg.Generations {
		s.TestAndAdd(bloom.HashKey([]byte(fmt.Sprint(i))), base.Add(time.Duration(i)*span))
	}
	st := s.Stats()
	if len(st.Generations) != cfg.Generations {
		return Sizing{}, fmt.Errorf("sizing %+v: %d generations open, want %d", cfg, len(st.Generations), cfg.Generations)
	}
	return Sizing{
		Config:          cfg,
		Bytes:           st.Bytes,
		GenerationBytes: st.Generations[len(st.Generations)-1].Bytes,
		BitsPerKey:      float64(st.Bytes) * 8 / float64(cfg.Capacity),
	}, nil
}
