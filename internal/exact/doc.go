// Package exact is bloomgate's exact memory: a local, checkpointable set of
// (generation, 128-bit key hash) pairs that confirms or refutes the Bloom
// filter's "seen".
//
// Behaviour:
//
//   - A generation is the filter's: the caller adds to the newest, checks
//     with Has (one generation) or Contains (all, newest first), and drops
//     what the filter dropped with DropBefore, which deletes those
//     generations' files.
//   - Adds are held in memory (visible at once) and written, FlushKeys at a
//     time, as run files: a generation's hashes, sorted, 16 bytes each,
//     checksummed, mapped read-only. A background merger merges the newest
//     generation's runs four at a time by size, and seals every older
//     generation into one run, which then never changes until it is
//     dropped.
//   - Answers are a pure function of the sequence of Add and DropBefore
//     calls: never of flush, merge or checkpoint timing, or of whether the
//     store was restored in between (TestDeterminism). The files are not:
//     two stores with equal answers may hold different runs.
//   - Durability comes from checkpoints only: what was added after the last
//     one is lost with the process, and the caller replays it from its
//     input, as it does for the filter. A store that was not closed cannot
//     be reopened (Open refuses it); Restore it from its checkpoint, which
//     reuses local files whose digest matches.
//   - Checkpoint returns the files (runs and a small manifest, with sizes
//     and SHA-256) that reproduce the store exactly as of the call. A file
//     an earlier checkpoint already uploaded is referenced, not uploaded
//     again (NewFiles): runs never change, and a sealed generation's run is
//     uploaded once.
//   - "Exact" means exact up to the hash: two keys with equal 128-bit
//     hashes are one key. For random keys that is ~n²/2¹²⁹ (10⁻²³ at 10⁸
//     keys); see docs/exact.md for keys an adversary chooses.
//
// Cost (2 shared cores; figures and commands in docs/exact.md): 16 bytes
// per key on disk plus 28 per run; an insert costs a small-map insert plus
// its share of sorting, writing and merging (a few hundred ns of CPU); a
// lookup binary-searches an in-memory index of 0.125 bytes per key, then
// at most 2 KiB of each run of the generation in the mapped file (no
// system call once the pages are mapped). Memory: the held adds (24 bytes
// each, at most FlushKeys of them, in one sorted array fed by a small map:
// pending.go), the indexes, and the pages of run files
// that lookups touched (file-backed: the kernel reclaims them under
// pressure).
//
// See docs/exact.md.
package exact
