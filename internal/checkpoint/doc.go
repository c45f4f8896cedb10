// Package checkpoint stores the filter state of each (consumer group, topic,
// partition) in object storage and brings it back after a crash or a
// rebalance. It knows generation objects only as opaque byte streams
// (GenerationSource) and never imports the filter package.
//
// # Layout
//
// Under the location's prefix (s3://bucket/prefix, file:///dir, mem://name):
//
//	<group>/<topic>/<partition>/manifests/<seq, 20 digits>.json
//	<group>/<topic>/<partition>/gens/<generation id>-<uploaded seq>-<writer>.gen
//	<group>/<topic>/<partition>/exact/<sha256>   (exact mode: the exact store's files)
//	_probe/create-only-<random>.json   (VerifyCreateOnly; deleted after)
//
// Group and topic are path-escaped. A manifest names the input offset the
// state covers, the output offsets at that moment, the filter parameters,
// and per generation its object, size, SHA-256 and CRC-32C and statistics;
// in exact mode also the exact store's files (opaque here, uploaded once
// like sealed generations, named by their digest) at the same input offset.
// It is JSON inside an envelope carrying the SHA-256 of its compact form.
//
// # Protocol
//
// A new owner calls Restore (newest usable manifest, falling back over
// corrupt or missing data), then Claim (writes manifest head+1), then Commit
// periodically. Commit uploads generation objects first — a sealed
// generation once, the live one every time — and then writes manifest seq+1
// create-only (If-None-Match: * on S3, link(2) on files). Objects it names
// again from an earlier commit are confirmed first to be still stored;
// one deleted behind the writer's back is uploaded again from the state
// handed to Commit, logged at error level and counted. A reader only ever
// follows manifests, so a checkpoint is visible completely or not at all.
// Two writers can never both create the same sequence: the loser gets
// ErrFenced and must stop owning the partition. See docs/checkpoints.md for
// the argument. Store.VerifyCreateOnly checks at start-up that the store
// honours create-only writes; one that does not would turn fencing off
// silently.
//
// # Cost
//
// A periodic checkpoint costs one upload of the live generation (or of its
// log segment), one small PUT, two LISTs of the partition's directory (one
// confirming that the objects named again are still stored, one after the
// manifest for fencing and retention), and deletes for retention.
// Uploads stream: at most (UploadConcurrency+1)·PartSize bytes are buffered
// (80 MiB by default), whatever the generation's size. Restore streams too,
// verifying as it reads.
package checkpoint
