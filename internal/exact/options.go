package exact

import (
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultFlushKeys is Options.FlushKeys' default.
const DefaultFlushKeys = 1 << 16

// Options configure a Store. The zero value is valid: it means the defaults.
type Options struct {
	// FlushKeys is how many adds are held in memory before they are
	// written as a run file. Memory: 24 bytes per held add (a sorted
	// array fed by a small map, pending.go), 1.5 MiB at the default of
	// 65536, plus the small map (about 100 KiB). Fewer means more, smaller
	// runs: more merging (CPU, disk writes, uploads) and more runs per
	// lookup until they are merged (docs/exact.md).
	FlushKeys int

	// Logger receives merge failures (Warn) and merge activity (Debug).
	// Default: discard.
	Logger *slog.Logger
	// Registerer, when set, receives the store's metrics (metrics.go).
	// Stores of several partitions in one process need distinct label
	// values: wrap it, e.g. prometheus.WrapRegistererWith(
	// prometheus.Labels{"topic": t, "partition": p}, reg).
	Registerer prometheus.Registerer
}

// Validate reports the first setting that cannot work.
func (o Options) Validate() error {
	switch {
	case o.FlushKeys < 0:
		return fmt.Errorf("exact store: flush keys %d: want ≥ 0 (0: default %d)", o.FlushKeys, DefaultFlushKeys)
	case o.FlushKeys > 1<<26:
		return fmt.Errorf("exact store: flush keys %d: want at most %d (about 1.5 GiB of memory)", o.FlushKeys, 1<<26)
	}
	return nil
}

func (o Options) withDefaults() Options {
	if o.FlushKeys == 0 {
		o.FlushKeys = DefaultFlushKeys
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}
