package worker

import (
	"context"
	"errors"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/bloomgate/bloomgate/internal/filterplan"
	"github.com/bloomgate/bloomgate/internal/keys"
)

// FilterParams sizes the filters: the whole topic's in Config.Filter, one
// partition's everywhere else (StateStore, Checkpoint), where Capacity is
// that partition's share of the topic's. FPR is each partition's target.
type FilterParams = filterplan.Params

// Filter is the dedup memory of one partition. Only the goroutine that owns
// the partition calls it, so implementations need no locking.
type Filter interface {
	// TestAndAdd reports whether key was seen inside the window before ts and
	// records it. ts is the event time; implementations must not read the
	// wall clock (determinism makes replay-based recovery exact).
	TestAndAdd(key []byte, ts time.Time) (seen bool)
	// TestAndAddBatch is TestAndAdd(keys[i], ts[i]) for each i in order,
	// with the results in seen (as long as keys). The outcome must be
	// exactly that of the calls one by one; a batch only lets the
	// implementation overlap their memory accesses.
	TestAndAddBatch(keys [][]byte, ts []time.Time, seen []bool)
	// Stats is called a few times per second at most.
	Stats() FilterStats
	// Snapshot returns a consistent view of the filter that a StateStore may
	// encode from another goroutine while the owner keeps inserting. It must
	// be cheap (copy-on-write, not a copy of the bitsets).
	Snapshot() Snapshot
}

// FallibleFilter is optionally implemented by a Filter that can fail, such
// as one that confirms its answers in a store on local disk. After a
// failure its answers cannot be trusted and its state is incomplete: the
// worker checks Err after every batch and, on an error, writes nothing of
// the batch and re-runs the partition's recovery (a restore from the last
// checkpoint and a replay), as after a failed write.
type FallibleFilter interface {
	Err() error
}

// FilterStats is what the status page and the filter metrics show.
type FilterStats struct {
	Bytes          uint64  `json:"bytes"`
	Fill           float64 `json:"fill_ratio"` // fill ratio of the newest generation
	EstFPR         float64 `json:"estimated_fpr"`
	EstKeys        uint64  `json:"estimated_keys"`
	Generations    int     `json:"generations"`
	OverflowStacks int     `json:"overflow_stacks"`
	// ClampedTimestamps counts records filed earlier than their timestamp
	// because it was too far ahead of the partition's event time.
	ClampedTimestamps uint64 `json:"clamped_timestamps"`
	// Ages, for the fingerprint filter, is its age histogram: entries per
	// generation of the window, oldest first (the last takes inserts); a
	// generation about to leave holds what expires at the next change.
	// Empty for the ring (its generations are its histogram).
	Ages []uint64 `json:"ages,omitempty"`
	// Layout, for the fingerprint filter, is how the table taking inserts
	// is laid out: "sealed" (a live table of the newest generation beside
	// a static set of the sealed ones) or "tagged" (one table of tagged
	// entries: small plans and overflow tables). Empty for the ring.
	Layout string `json:"layout,omitempty"`
	// Exact describes an exact store behind the filter (nil: none).
	Exact *ExactStats `json:"exact,omitempty"`
}

// ExactStats describes the exact store that confirms a filter's positives.
type ExactStats struct {
	// RefutedPositives counts the filter's positives the store refuted:
	// false positives avoided, the records forwarded instead of judged
	// duplicate (replayed records included).
	RefutedPositives uint64 `json:"refuted_positives"`
	// UnverifiedPositives counts positives the store could not check
	// (they matched only generations filled before exact mode was on) and
	// the filter's answer stood.
	UnverifiedPositives uint64 `json:"unverified_positives"`
	Keys                uint64 `json:"keys"`
	DiskBytes           uint64 `json:"disk_bytes"`
}

// Snapshot is an opaque filter view handed to StateStore.Commit. The
// StateStore that created the filter knows its concrete type.
type Snapshot interface {
	Release()
}

// StateStore restores and checkpoints partition filters. It owns both the
// filter implementation and the object store, so the worker never sees
// either format.
type StateStore interface {
	// NewFilter returns an empty filter.
	NewFilter(p FilterParams) (Filter, error)
	// Partition returns the handle of one input partition. A handle is used
	// by one goroutine at a time.
	Partition(topic string, partition int) PartitionStore
}

// PartitionFilterMaker is optionally implemented by a PartitionStore whose
// filters belong to their partition (state kept in a local directory per
// partition): the worker takes a partition's empty filter (no checkpoint,
// or none usable with on-restore-failure=empty) from the handle instead of
// StateStore.NewFilter.
type PartitionFilterMaker interface {
	NewFilter(p FilterParams) (Filter, error)
}

// Retainer is optionally implemented by a StateStore that keeps filters of
// revoked partitions in memory; the worker calls Retain with the new
// assignment at the start of every generation.
type Retainer interface {
	Retain(topic string, partitions []int)
}

// PartitionStore is one partition's checkpoint history.
type PartitionStore interface {
	// Restore loads the newest usable checkpoint. It returns an error
	// wrapping ErrNoCheckpoint when none was ever written, and one wrapping
	// ErrNoUsableCheckpoint when some exist but none loads.
	Restore(ctx context.Context, p FilterParams) (*Restored, error)
	// Claim fences earlier owners: after it returns, their Commit calls fail
	// with ErrFenced. It is called once per assignment, after Restore.
	Claim(ctx context.Context, owner string) error
	// Commit stores a checkpoint. It returns an error wrapping ErrFenced if
	// another owner claimed the partition since this handle's Claim.
	Commit(ctx context.Context, cp Checkpoint) error
}

// Restored is a loaded checkpoint.
type Restored struct {
	Filter        Filter
	InputOffset   int64                    // all input offsets < InputOffset are covered
	OutputOffsets map[string]map[int]int64 // where the recovery scan starts
	// Sequence and Written identify the checkpoint in logs (0 and zero
	// time when a StateStore has no such notion).
	Sequence uint64
	Written  time.Time
	// Seed is the position of an unfinished seeding read of another topic
	// (nil: none).
	Seed *SeedProgress
	// SeedingUntil is Checkpoint.SeedingUntil of the restored checkpoint.
	SeedingUntil int64
	// LegacyProvenance is set when the checkpoint was written by a build
	// from before provenance headers: records without one in the written
	// topics may be this memory's own, and the recovery scan counts them
	// as written (a rolling upgrade). Unset, such records count as written
	// only below LegacyBefore.
	LegacyProvenance bool
	// LegacyBefore is, per written topic and partition, the offset below
	// which records without a provenance header may be this memory's own
	// (Checkpoint.LegacyBefore); nil: none.
	LegacyBefore map[string]map[int]int64
	// Mark is Checkpoint.Mark of the restored checkpoint (nil: none).
	Mark *InputMark
	// Lost lists the generations whose stored state did not load: the
	// filter holds them empty (or, ExactOnly, without their exact store).
	// Before replaying, the worker re-reads the input from the smallest
	// KeysFrom (or the log start, if later) to InputOffset and hands the
	// keys to the filter's Rebuilder, then reports each one as rebuilt,
	// forgotten or unverified.
	Lost []LostGeneration
}

// LostGeneration is a generation of a restored filter whose stored state
// did not load (docs/checkpoints.md, "Partial restore").
type LostGeneration struct {
	ID uint64 `json:"generation"`
	// Start and End bound the partition's event time while the generation
	// took keys: it holds the keys of the records processed meanwhile.
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// Until is the event time at which the generation would have left the
	// window: repeats of keys it alone held are forwarded until then.
	Until time.Time `json:"until"`
	// Keys is how many keys it held, as the checkpoint recorded.
	Keys uint64 `json:"keys"`
	// KeysFrom is the first input offset whose key it may hold; -1: not
	// recorded, it cannot be rebuilt.
	KeysFrom int64 `json:"keys_from_offset"`
	// ExactOnly: only the exact store's copy of its keys was lost. The
	// filter holds them; its positives are unverified (the filter's answer
	// stands) until Until.
	ExactOnly bool `json:"exact_only,omitempty"`
	// Reason is what failed (the object and the check).
	Reason string `json:"reason"`
	// Checkpoint is the sequence of the checkpoint it was restored from.
	Checkpoint uint64 `json:"checkpoint"`
	// Outcome is the worker's: LostRebuilt, LostForgotten or LostUnverified.
	Outcome string `json:"outcome,omitempty"`
}

// Outcomes of a lost generation (LostGeneration.Outcome, and the reason
// label of bloomgate_checkpoint_generations_lost_total).
const (
	LostRebuilt    = "rebuilt"    // refilled from the input: exact
	LostForgotten  = "forgotten"  // the input no longer holds (all of) its keys
	LostUnverified = "unverified" // exact store lost: positives unverified until it leaves the window
)

// RebuiltFrom reports whether reading the input from offset from gives
// back every key of the generation: its keys begin at or after from.
func (g LostGeneration) RebuiltFrom(from int64) bool {
	return !g.ExactOnly && g.KeysFrom >= 0 && g.KeysFrom >= from
}

// Rebuilder is implemented by a Filter restored with lost generations
// (Restored.Lost) that can refill them from the input.
type Rebuilder interface {
	// StartRebuild begins a rebuild from input offset from: the smallest
	// KeysFrom of the lost generations, or the input's log start if that
	// is later (then a generation whose keys begin earlier gets what is
	// left: a superset of its keys among the retained records, never
	// all of them; see LostGeneration.RebuiltFrom).
	StartRebuild(from int64)
	// RebuildKey hands over the key and timestamp of the input record at
	// offset, for every record of [from, Restored.InputOffset) whose key
	// extracts, in input order, as the worker reads them: the filter adds
	// the key to each lost generation that held it. It returns false once
	// no later record can go into a lost generation (a newer one took
	// over from all of them): the worker stops reading there.
	RebuildKey(offset int64, key []byte, ts time.Time) (more bool)
	// FinishRebuild ends the rebuild; it returns the keys added back.
	FinishRebuild() uint64
}

// InputTracker is optionally implemented by a Filter that records where in
// the input its generations' keys begin (LostGeneration.KeysFrom), so that
// a generation whose stored state is lost later can be rebuilt from the
// input. The worker calls ReadingFrom once per session, after the restore
// and before any key: offset is the first input offset the session reads;
// foreign is set when keys of another topic (Config.SeedTopic) come
// first, which the input cannot give back.
type InputTracker interface {
	ReadingFrom(offset int64, foreign bool)
}

// SeedProgress is how far a new memory has read the topic it is seeded
// from (Config.SeedTopic): the state covers its records before Next; the
// read ends at End, the topic's high-water mark when the memory began.
type SeedProgress struct {
	Topic     string
	Partition int
	Next, End int64
}

// Planner is optionally implemented by a StateStore that can tell, before
// any partition starts, how much memory one partition's filter will hold
// at its planned size (logged at start) and whether such a filter can be
// built at all (a plan refused at start, with the fix, instead of failing
// every partition at runtime).
type Planner interface {
	PlannedBytes(p FilterParams) uint64
	// CheckParams returns nil if a filter of p can be built, else an error
	// saying which limit it exceeds and by how much.
	CheckParams(p FilterParams) error
}

// Checkpoint is the state handed to PartitionStore.Commit.
type Checkpoint struct {
	// InputOffset is the next input offset to process: every record before
	// it was handled and its output writes acknowledged.
	InputOffset int64
	// OutputOffsets are, per written topic and partition, offsets at or
	// before which any record written for input offsets >= InputOffset
	// lies: the recovery scan starts there.
	OutputOffsets map[string]map[int]int64
	Params        FilterParams
	Snapshot      Snapshot
	Owner         string
	// Seed is the position of an unfinished seeding read (nil: none).
	Seed *SeedProgress
	// SeedingUntil is where a new group's seeding of the input ends (its
	// start offset) while the seeding is unfinished, so that a restart
	// that resumes it reports it as seeding; 0: none.
	SeedingUntil int64
	// LegacyBefore is, per written topic and partition, the offset below
	// which records without a provenance header may have been written by
	// this memory under a build from before provenance headers (the end
	// of the recovery scan that first met such a checkpoint). Entries the
	// checkpoint's OutputOffsets have passed are left out; nil: none.
	LegacyBefore map[string]map[int]int64
	// Mark is a data record of the input below InputOffset (the last one
	// handled), by which a later recovery tells whether the input's log is
	// still the one the state was built from (inputlog.go); nil: none
	// handled yet.
	Mark *InputMark
}

// Errors a StateStore reports; the worker branches on them with errors.Is.
var (
	ErrNoCheckpoint       = errors.New("no checkpoint")
	ErrNoUsableCheckpoint = errors.New("no usable checkpoint")
	ErrFenced             = errors.New("checkpoint fenced by a newer owner")
	// ErrIncompatible marks an ErrNoUsableCheckpoint error whose reason
	// is the settings: the checkpoints were written with another
	// definition of a key or another filter kind. The store's error says
	// which and names the fix; the worker reports it as it is.
	ErrIncompatible = errors.New("checkpoint incompatible with the settings")
)

// MemoryChecker is optionally implemented by a StateStore that can tell,
// before any partition is assigned, which partitions of a topic it could
// not restore under the settings: CheckMemory returns one error wrapping
// ErrIncompatible that names them all, nil if there are none, and leaves
// any other failure (a store that does not answer) to the restore.
type MemoryChecker interface {
	CheckMemory(ctx context.Context, topic string, partitions int) error
}

// Extractor derives the dedup key of a record. *keys.Extractor satisfies it.
type Extractor interface {
	// Extract appends the key to dst. A failure is reported with an error
	// whose Reason (see ReasonOf) names the cause in a small fixed set.
	Extract(dst []byte, key, value []byte, headers []kafka.Header) ([]byte, error)
}

// KeyError is a key extraction failure with a reason from the small fixed
// set of keys.Reasons (missing, empty, malformed_json, too_large,
// invalid_utf8, null_key, bad_url, unsupported_type, duplicate_key_field,
// null_value), used as a metric label and as the bloomgate-error header
// of dead-lettered records. An Extractor may return a *keys.Error instead;
// reasonOf reads both.
type KeyError struct{ Reason string }

func (e *KeyError) Error() string { return "extracting key: " + e.Reason }

// KeyReasons is the fixed set of extraction failure reasons; metric series
// are created for each up front.
var KeyReasons = append(keys.Reasons(), "other")
