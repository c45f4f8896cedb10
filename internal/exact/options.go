package exact

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/prometheus/client_golang/prometheus"
)

// Defaults; see Options.
const (
	DefaultCacheBytes    = 32 << 20
	DefaultMemTableBytes = 8 << 20
	DefaultBatchKeys     = 8192
)

// Options configure a Store. The zero value is valid: it means the defaults.
type Options struct {
	// CacheBytes bounds the memory of the store's pebble instance: data,
	// index and filter blocks, and the memtables, which are reserved from
	// the same budget (up to two of MemTableBytes). Default 32 MiB.
	// Ignored when Cache is set.
	CacheBytes int64
	// Cache, when set, is shared with other stores (one per partition of a
	// worker), so that the worker's memory is one budget instead of one per
	// partition. The caller keeps its reference and closes it after the
	// last store.
	Cache *Cache
	// MemTableBytes is the size of the memtable that buffers applied adds
	// before they are written as a table. Larger means fewer tables and
	// compactions (less CPU per insert) and more memory. Default 8 MiB.
	MemTableBytes int64
	// BloomBitsPerKey adds a Bloom filter of that many bits per key to each
	// table (pebble's table filters; 10 ≈ 1 % false positives). 0, the
	// default, adds none: a lookup of an absent key then reads one data
	// block per table whose range holds it. Filters cost BloomBitsPerKey/8
	// bytes per key on disk and in the cache; see docs/exact.md for when
	// they pay.
	BloomBitsPerKey int
	// BatchKeys is how many adds are buffered in memory before they are
	// applied to pebble as one sorted batch. Buffered adds are visible to
	// Has at once; the buffer only amortizes pebble's per-batch cost.
	// Default 8192.
	BatchKeys int

	// Logger receives pebble's background errors (Error) and its
	// flush/compaction chatter (Debug). Default: discard.
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
	case o.CacheBytes < 0:
		return fmt.Errorf("exact store: cache bytes %d: want ≥ 0 (0: default %d)", o.CacheBytes, DefaultCacheBytes)
	case o.MemTableBytes < 0:
		return fmt.Errorf("exact store: memtable bytes %d: want ≥ 0 (0: default %d)", o.MemTableBytes, DefaultMemTableBytes)
	case o.MemTableBytes != 0 && o.MemTableBytes < 1<<20:
		return fmt.Errorf("exact store: memtable bytes %d: want at least 1 MiB", o.MemTableBytes)
	case o.MemTableBytes > 1<<30:
		return fmt.Errorf("exact store: memtable bytes %d: want at most 1 GiB", o.MemTableBytes)
	case o.BloomBitsPerKey < 0 || o.BloomBitsPerKey > 32:
		return fmt.Errorf("exact store: bloom bits per key %d: want 0 (none) to 32", o.BloomBitsPerKey)
	case o.BatchKeys < 0:
		return fmt.Errorf("exact store: batch keys %d: want ≥ 0 (0: default %d)", o.BatchKeys, DefaultBatchKeys)
	}
	o = o.withDefaults()
	if o.Cache == nil && o.CacheBytes < 2*o.MemTableBytes {
		return fmt.Errorf("exact store: cache bytes %d: want at least twice the memtable bytes (%d), which are reserved from it", o.CacheBytes, o.MemTableBytes)
	}
	return nil
}

func (o Options) withDefaults() Options {
	if o.CacheBytes == 0 {
		o.CacheBytes = DefaultCacheBytes
	}
	if o.MemTableBytes == 0 {
		o.MemTableBytes = DefaultMemTableBytes
	}
	if o.BatchKeys == 0 {
		o.BatchKeys = DefaultBatchKeys
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// formatVersion pins pebble's on-disk format, so that a checkpoint does
// not silently change format with a pebble upgrade: TableFormatPebblev6
// (columnar blocks, which store the 24-byte keys in ~17 bytes without
// compression, and a checksummed footer).
const formatVersion = pebble.FormatTableFormatV6

// pebbleOptions maps o (with defaults) onto pebble's options.
func (o Options) pebbleOptions(cache *pebble.Cache) *pebble.Options {
	po := &pebble.Options{
		Cache: cache,
		// The store needs durability only at checkpoints: what was added
		// after the last one is replayed from Kafka. Without a WAL an add
		// costs a memtable insert; Checkpoint flushes the memtable.
		DisableWAL:         true,
		FormatMajorVersion: formatVersion,
		MemTableSize:       uint64(o.MemTableBytes),
		Logger:             pebbleLogger{o.Logger},
		EventListener: &pebble.EventListener{
			BackgroundError: func(err error) { o.Logger.Error("exact store background error", "err", err) },
			DataCorruption: func(info pebble.DataCorruptionInfo) {
				o.Logger.Error("exact store data corruption", "path", info.Path, "err", info.Details)
			},
		},
		// Pebble keeps every manifest edit until the file reaches this
		// size; the manifest is uploaded with every checkpoint, so keep it
		// small (rotation writes a fresh snapshot of the LSM).
		MaxManifestFileSize: 1 << 20,
	}
	// Split tables at generation boundaries: a table then never holds keys
	// of two generations, so a sealed generation's tables are not rewritten
	// by compactions of the live one, and dropping a generation deletes
	// whole tables (delete-only compactions) instead of rewriting them.
	po.Experimental.SpanPolicyFunc = generationSpans
	for i := range po.Levels {
		// Hashes are random: block compression gains nothing beyond the
		// columnar prefix encoding and costs CPU per block read.
		po.Levels[i].Compression = func() *sstable.CompressionProfile { return sstable.NoCompression }
		if o.BloomBitsPerKey > 0 {
			po.Levels[i].FilterPolicy = bloom.FilterPolicy(o.BloomBitsPerKey)
		}
	}
	return po
}

// generationSpans ends a span (and so every table being written) at the
// next generation's first key.
func generationSpans(start []byte) (pebble.SpanPolicy, []byte, error) {
	gen, ok := keyGen(start)
	if !ok || gen >= MaxGeneration {
		return pebble.SpanPolicy{}, nil, nil
	}
	return pebble.SpanPolicy{}, genPrefix(gen + 1), nil
}

// Cache is a block cache that several stores share.
type Cache struct{ c *pebble.Cache }

// NewCache returns a cache of the given size; memtables of the stores
// using it are reserved from it too.
func NewCache(bytes int64) (*Cache, error) {
	if bytes <= 0 {
		return nil, errors.New("exact store: cache bytes must be positive")
	}
	return &Cache{c: pebble.NewCache(bytes)}, nil
}

// Close drops the caller's reference; the memory is freed when the last
// store using the cache is closed too.
func (c *Cache) Close() { c.c.Unref() }

// pebbleLogger sends pebble's log lines to slog. Pebble calls Fatalf on
// broken invariants and expects it not to return (its default logger
// exits); this one logs and panics.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	if p.l.Enabled(context.Background(), slog.LevelDebug) {
		p.l.Debug("pebble: " + fmt.Sprintf(format, args...))
	}
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error("pebble: " + fmt.Sprintf(format, args...))
}

func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := "pebble: " + fmt.Sprintf(format, args...)
	p.l.Error(msg)
	panic(msg)
}
