// Package bloom is bloomgate's memory of seen keys: a cache-line-blocked Bloom
// filter, a scalable stack of such filters for overflow, a rotating ring of
// generations over event time, and a streamed, checksummed binary format.
//
// Behaviour and cost:
//
//   - Filter: every key touches one 512-bit (64-byte) block, chosen from the
//     first half of its murmur3-128 hash by multiply-shift; the k probe bits
//     inside the block are independent 9-bit fields of the second half.
//     One cache miss per TestAndAdd, no allocations. Sizing computes the
//     false-positive rate of the blocked layout (a Poisson mixture over keys
//     per block), so the filter meets the requested rate with 3 % (p = 1 %)
//     to 8 % (p = 0.1 %) more bits than a classic filter.
//   - Bits live in 64 KiB pages (carved from one array advised for huge
//     pages) so that a snapshot is copy-on-write: taking one costs O(pages)
//     (tens of microseconds for 120 MB), and the owner clones a page on its
//     first write to it after the snapshot.
//   - Shard: G generations, each covering span = ⌈W/(G−1)⌉ of event time
//     aligned to the Unix epoch; a key is remembered for at least W and at
//     most W·G/(G−1) after its latest sighting. Timestamps come from the
//     caller: nothing here reads the wall clock.
//   - Restored under another span (window or generation count changed),
//     a shard keeps the checkpoint's generations as sealed legacy
//     generations beside a ring of the new plan; each answers lookups
//     until event time reaches its end + the new window, so no key is
//     forgotten sooner than min(old, new window) after its sighting.
//   - A generation that receives more keys than planned stacks sub-filters
//     with twice the capacity and a tighter rate (Almeida et al. 2007), so
//     the false-positive rate stays bounded.
//   - Optionally (Shard.EnableJournal) the newest generation journals the
//     hashes that set bits, 16 bytes per new key, dropped once a commit
//     covers them and bounded by a quarter of the generation's size: a
//     checkpoint can then store a log segment (log.go) instead of the
//     whole generation, and replaying it gives the same bits.
//
// The fingerprint kind (FingerprintShard, tagged.go) holds the same
// window in one quotient table of age-tagged fingerprints (qtable.go):
// a key's remainder and the generation it was added in modulo 2^⌈log2 G⌉,
// (r + a + 2.3)/α bits per entry (14.8 bits per window key at 1 % with
// G = 8, against the ring's 17.9), one metadata and one entry cache line
// per lookup, the leaving generation dropped in one pass over the table at
// each generation change, overflow into tables of the next level, tables
// stored in their own format (tagged_format.go). Slower per key than the
// ring (cluster shifts near its peak load, the drops). Where it takes less
// memory (plans of ~200 k keys or more per partition) the plan's table is
// laid out sealed (sealed.go): the newest generation in a quotient table
// of its own, the sealed ones in a static Elias–Fano coded set rebuilt by
// one streaming merge at each generation change — 13.9 bits per window key
// at 1 % with G = 8 (table format v2).
//
// A Filter, Generation, Shard, Table and FingerprintShard belong to one
// goroutine. Only a Snapshot or FingerprintSnapshot may be read from
// another goroutine while the owner keeps inserting.
//
// See docs/filter.md for the math, the format and the measurements.
package bloom
