// Package exact is bloomgate's exact memory: a local, checkpointable set of
// (generation, 128-bit key hash) pairs that confirms or refutes the Bloom
// filter's "seen". It is a thin layer over pebble (CockroachDB's LSM
// store) with a key layout made for the filter's window.
//
// Behaviour:
//
//   - Keys are the generation ID (8 bytes, big-endian) followed by the hash
//     (16 bytes), values are empty. A generation is the filter's: the
//     caller adds to the newest, checks with Has (one generation) or
//     Contains (all), and drops what the filter dropped with DropBefore,
//     one range deletion.
//   - Answers are a pure function of the sequence of Add and DropBefore
//     calls: never of flush, compaction or checkpoint timing, batch sizes
//     or whether the store was restored in between (TestDeterminism). The
//     files on disk are not: two stores with equal answers may hold
//     different tables.
//   - Durability comes from checkpoints only (no write-ahead log): what
//     was added after the last checkpoint is lost with the process, and the
//     caller replays it from its input, as it does for the filter. After a
//     crash the local directory must not be trusted; Restore from the
//     checkpoint (it reuses local files whose digest matches).
//   - Checkpoint returns the files (pebble's tables, manifest, options and
//     markers, with sizes and SHA-256) that reproduce the store exactly as
//     of the call. Tables are immutable and split at generation
//     boundaries; a generation that is no longer the newest is compacted
//     once ("sealed") and its tables then stay the same in every later
//     checkpoint, so they are uploaded once (NewFiles).
//   - "Exact" means exact up to the hash: two keys with equal 128-bit
//     hashes are one key. For random keys that is ~n²/2¹²⁹ (10⁻²³ at 10⁸
//     keys); see docs/exact.md for chosen keys.
//
// Cost (2 shared cores, details and commands in docs/exact.md): about
// 17 bytes per key on disk after compaction; an insert costs one memtable
// insert plus its share of flushes and compactions (a few µs of CPU); a
// lookup that misses the block cache reads an index and a data block per
// table whose key range holds the key (page cache). Memory is bounded by
// Options.CacheBytes (block cache and memtables) plus pebble's per-table
// metadata.
//
// See docs/exact.md.
package exact
