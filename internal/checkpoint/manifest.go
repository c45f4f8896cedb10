package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/bloomgate/bloomgate/internal/filterplan"
)

// ManifestVersion is the newest manifest format this package writes and
// reads. Readers accept exactly the versions they know; anything else is
// reported as ErrCorrupt (and Restore falls back to an older manifest).
// Optional fields added since version 1 (key, hash_seed, event_time_ns,
// isolation, exact, and per generation capacity, fpr, keys_from, lost and
// ages) keep the version: a reader without them ignores them, and a reader
// with them treats their absence as "not recorded". (A lost generation
// names no object; a reader without lost refuses that as corrupt and falls
// back, which is what it must do: it cannot rebuild the generation.) A log
// chain (GenerationRef.Log) is an exception: a reader that ignored it
// would load a live generation without the keys of its segments. So a
// manifest naming a log is written as version 2 (builds that read only
// version 1 refuse it and fall back instead of forgetting keys). The
// fingerprint filter (FilterParams.Kind) is the other: its objects are
// tables, which a reader that knows only generations would take for
// corrupt generations and try to rebuild; such a manifest is version 3.
// Every other manifest is written as version 1 (readable by every build).
const ManifestVersion = 3

// manifestVersionNoLog and manifestVersionLog are the versions of ring
// manifests without and with log chains.
const (
	manifestVersionNoLog = 1
	manifestVersionLog   = 2
)

// formatVersion is the version m is written as: 3 for the fingerprint
// filter, else 2 if a generation names log segments, else 1.
func (m *Manifest) formatVersion() int {
	if m.Filter.Kind == FilterFingerprint {
		return ManifestVersion
	}
	for _, g := range m.Generations {
		if len(g.Log) > 0 {
			return manifestVersionLog
		}
	}
	return manifestVersionNoLog
}

// manifestFormat names the format in every manifest envelope.
const manifestFormat = "bloomgate-checkpoint-manifest"

// FilterParams are the filter settings a checkpoint was taken with: the
// partition's plan, as the worker hands it to the store, and the filter's
// kind. Their JSON form (MarshalJSON) is the manifest's and stays here.
type FilterParams struct {
	// Kind is the filter (FilterRing, written as "" so that ring
	// manifests stay readable by builds from before kinds, or
	// FilterFingerprint); it says what the generation objects are.
	Kind string
	filterplan.Params
}

// Filter kinds (FilterParams.Kind).
const (
	FilterRing        = ""            // a ring of Bloom generations: objects are generations
	FilterFingerprint = "fingerprint" // one table of tagged fingerprints: objects are tables
)

type filterParamsJSON struct {
	Kind        string  `json:"kind,omitempty"`
	Window      string  `json:"window"`
	Generations int     `json:"generations"`
	Capacity    uint64  `json:"capacity"`
	FPR         float64 `json:"fpr"`
}

// MarshalJSON writes Window as a Go duration string ("24h0m0s").
func (f FilterParams) MarshalJSON() ([]byte, error) {
	return json.Marshal(filterParamsJSON{Kind: f.Kind, Window: f.Window.String(), Generations: f.Generations, Capacity: f.Capacity, FPR: f.FPR})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (f *FilterParams) UnmarshalJSON(b []byte) error {
	var j filterParamsJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	w, err := time.ParseDuration(j.Window)
	if err != nil {
		return fmt.Errorf("filter window: %w", err)
	}
	if j.Kind != FilterRing && j.Kind != FilterFingerprint {
		return fmt.Errorf("filter kind %q", j.Kind)
	}
	*f = FilterParams{Kind: j.Kind, Params: filterplan.Params{Window: w, Generations: j.Generations, Capacity: j.Capacity, FPR: j.FPR}}
	return nil
}

// KeyIdentity records what makes a dedup key: two checkpoints are
// comparable only if every field is equal. Hash names the hash function and
// its seed (a fingerprint, never a secret).
type KeyIdentity struct {
	Spec      string `json:"spec"`
	Normalize string `json:"normalize"`
	Hash      string `json:"hash"`
	// URLRules and URLStripParams are the opt-in URL rules on top of
	// normalize url, expanded and canonical (keys.URLRules Names and
	// StripParams). Absent in manifests written before they existed, and
	// whenever there are none: the same definition.
	URLRules       string `json:"url_rules,omitempty"`
	URLStripParams string `json:"url_strip_params,omitempty"`
}

func (k KeyIdentity) String() string {
	s := fmt.Sprintf("key %s, normalize %s", k.Spec, k.Normalize)
	if k.URLRules != "" {
		s += ", url rules " + k.URLRules
	}
	if k.URLStripParams != "" {
		s += ", url strip params " + k.URLStripParams
	}
	return s + ", hash " + k.Hash
}

// GenerationRef describes one stored generation object as a manifest names
// it: where it is, how to verify it, and the generation's statistics.
type GenerationRef struct {
	ID      uint64    `json:"id"`
	Sealed  bool      `json:"sealed"`
	Start   time.Time `json:"start"`
	End     time.Time `json:"end"`
	Inserts uint64    `json:"inserts"`
	EstKeys uint64    `json:"estimated_keys"`
	Fill    float64   `json:"fill"`
	EstFPR  float64   `json:"estimated_fpr"`
	Stacks  int       `json:"stacks"`

	// Key is the object key relative to the partition's directory
	// ("gens/…").
	Key string `json:"key"`
	// Encoding of the stored bytes: "zstd" or "none". Readers returned by
	// Restore's open decode it; callers see the generation's own bytes.
	Encoding string `json:"encoding"`
	// Bytes and SHA256 describe the stored object; RawBytes is the length
	// the GenerationSource wrote.
	Bytes    int64  `json:"bytes"`
	RawBytes int64  `json:"raw_bytes"`
	CRC32C   string `json:"crc32c"`
	SHA256   string `json:"sha256"`
	// Seq is the manifest sequence the object was uploaded for.
	Seq uint64 `json:"uploaded_seq"`
	// ExactGen is the generation of the exact store (Manifest.Exact) that
	// holds this generation's keys; 0: none (filter only, or a generation
	// filled at least in part before exact mode was on).
	ExactGen uint64 `json:"exact_generation,omitempty"`
	// Log, on an unsealed generation, lists the segments to replay, in
	// order, onto the object above (the base, uploaded by an earlier
	// checkpoint) to get the generation as of this manifest; the
	// statistics above describe that state. Empty: the object is the
	// generation.
	Log []LogRef `json:"log,omitempty"`

	// Capacity and FPR are the generation's own plan (planned keys and
	// rate budget), with which a lost generation is opened again empty;
	// 0 in manifests written before they were recorded (the manifest's
	// filter plan is assumed).
	Capacity uint64  `json:"capacity,omitempty"`
	FPR      float64 `json:"fpr,omitempty"`
	// KeysFrom is where in the input the generation's keys begin: every
	// key it holds was inserted while processing an input record at or
	// after KeysFrom.Offset (nil: not known, as in manifests written
	// before it was recorded, or after keys of another topic were read).
	// A generation that cannot be loaded is rebuilt from there.
	KeysFrom *KeysFrom `json:"keys_from,omitempty"`
	// Ages, for a table of the fingerprint filter, is its age histogram:
	// entries per generation still in the window, oldest first (the last
	// is the generation of End). Absent for ring generations.
	Ages []uint64 `json:"ages,omitempty"`
	// ExactGens, for a table of the fingerprint filter in exact mode, maps
	// each of its generations (spans of event time) to the exact store's
	// generation holding the keys filed while it was the newest (a ring
	// generation's ExactGen). Two tables may list the same span (a table
	// that filled up and the one that took over), with the same exact
	// generation.
	ExactGens []ExactSpan `json:"exact_generations,omitempty"`
	// Lost, when set, says why the generation's stored state could not be
	// loaded (the object and the check that failed). A lost generation
	// names no object: it is restored empty, with its ID and range, and
	// rebuilt from KeysFrom where the input still holds it. Only Claim
	// writes lost generations (a copy of a partial restore); a Commit
	// uploads whatever the generation holds by then.
	Lost string `json:"lost,omitempty"`
}

// ExactSpan is one generation of a table (its event-time range
// [Start, End) in Unix ns) and its exact store generation.
type ExactSpan struct {
	Start int64  `json:"start_ns"`
	End   int64  `json:"end_ns"`
	Gen   uint64 `json:"exact_generation"`
}

// KeysFrom is a point of the input partition where a generation's keys
// begin: an input offset, the event-time frontier there (what
// --max-time-jump clamps against), and the ring's newest generation there.
// From it, re-reading the input decides for every record which generation
// was the newest (the one its key went into) exactly as the original run
// did (docs/checkpoints.md, "Partial restore").
type KeysFrom struct {
	Offset int64 `json:"offset"`
	// EventTime is the frontier at Offset in Unix ns (0: none yet).
	EventTime int64 `json:"event_time_ns,omitempty"`
	// NewestID and NewestSpan (ns) identify the ring's newest generation
	// at Offset; NewestSpan 0: the ring was empty.
	NewestID   uint64 `json:"newest_id,omitempty"`
	NewestSpan int64  `json:"newest_span_ns,omitempty"`
}

// IsLost reports whether the generation's stored state was lost (Lost).
func (g GenerationRef) IsLost() bool { return g.Lost != "" }

// asLost is g as a lost generation: the same ID, range, statistics, plan
// and input bound, no object.
func (g GenerationRef) asLost(reason string) GenerationRef {
	if reason == "" {
		reason = "lost"
	}
	return GenerationRef{
		ID: g.ID, Sealed: g.Sealed, Start: g.Start, End: g.End, Inserts: g.Inserts, EstKeys: g.EstKeys,
		Fill: g.Fill, EstFPR: g.EstFPR, Stacks: g.Stacks, ExactGen: g.ExactGen,
		Capacity: g.Capacity, FPR: g.FPR, Ages: g.Ages, ExactGens: g.ExactGens, KeysFrom: g.KeysFrom, Lost: reason,
	}
}

// objects lists the keys of the stored objects that hold g: its object and
// its log segments (none for a lost generation).
func (g GenerationRef) objects() []string {
	if g.IsLost() {
		return nil
	}
	keys := make([]string, 0, 1+len(g.Log))
	keys = append(keys, g.Key)
	for _, l := range g.Log {
		keys = append(keys, l.Key)
	}
	return keys
}

// LogRef is one stored log segment of a generation: the hashes added
// since the previous object of its chain (opaque here, internal/bloom's
// log format). Stored as is and named by its content ("logs/<sha256>").
type LogRef struct {
	Key     string `json:"key"`
	Bytes   int64  `json:"bytes"`
	SHA256  string `json:"sha256"`
	Entries int64  `json:"entries"`
	// Seq is the manifest sequence the object was uploaded for.
	Seq uint64 `json:"uploaded_seq"`
}

// Ref is the GenerationRef under which Restore's open reads the segment:
// stored as is, verified by size and SHA-256 as it is read.
func (l LogRef) Ref() GenerationRef {
	return GenerationRef{Key: l.Key, Encoding: encodingNone, Bytes: l.Size(), RawBytes: l.Size(), SHA256: l.SHA256, Seq: l.Seq}
}

// Size is the segment's stored size.
func (l LogRef) Size() int64 { return l.Bytes }

// Tail names the stored state of the generation: the key of its last log
// segment, or of its object when it has none. A log handed to Commit
// continues a chain only from its tail (GenerationLog.After).
func (g GenerationRef) Tail() string {
	if n := len(g.Log); n > 0 {
		return g.Log[n-1].Key
	}
	return g.Key
}

// LogBytes and LogEntries sum the generation's log segments.
func (g GenerationRef) LogBytes() (n int64) {
	for _, l := range g.Log {
		n += l.Bytes
	}
	return n
}

// LogEntries is the number of entries of the generation's log segments.
func (g GenerationRef) LogEntries() (n int64) {
	for _, l := range g.Log {
		n += l.Entries
	}
	return n
}

// ExactState is the partition's exact store (exact mode) at the manifest's
// input offset: the files that restore it and what it holds. The files are
// opaque here (internal/exact's runs and manifest); each is one object,
// stored as is and named by its content ("exact/<sha256>"), uploaded once
// and referenced by every later manifest that lists it.
type ExactState struct {
	Layout string `json:"layout"`
	// Floor: store generations below it are dropped.
	Floor uint64 `json:"floor"`
	// NextGen is the store generation the filter's next new generation
	// gets.
	NextGen uint64      `json:"next_generation"`
	Keys    int64       `json:"keys"`
	Files   []ExactFile `json:"files"`
}

// ExactFile is one stored file of an exact store's checkpoint.
type ExactFile struct {
	Name   string `json:"name"` // in the store's directory
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// Key is the object key relative to the partition's directory
	// ("exact/<sha256>").
	Key string `json:"key"`
	// Seq is the manifest sequence the object was uploaded for.
	Seq uint64 `json:"uploaded_seq"`
}

// Ref is the GenerationRef under which Restore's open reads the file:
// stored as is, verified by size and SHA-256 as it is read.
func (f ExactFile) Ref() GenerationRef {
	return GenerationRef{Key: f.Key, Encoding: encodingNone, Bytes: f.Size, RawBytes: f.Size, SHA256: f.SHA256, Seq: f.Seq}
}

// Bytes is the total size of the store's files.
func (e *ExactState) Bytes() int64 {
	var n int64
	for _, f := range e.Files {
		n += f.Size
	}
	return n
}

// Manifest is one checkpoint of a partition: what state it covers and the
// generation objects holding it. Manifests are immutable and numbered; the
// newest valid one is the partition's state.
type Manifest struct {
	Version   int       `json:"version"`
	Seq       uint64    `json:"seq"`
	CreatedAt time.Time `json:"created_at"`
	Owner     string    `json:"owner"`
	// Writer is random per Partition handle: two writers never produce the
	// same manifest bytes, so a retried create-only write can tell its own
	// earlier success from another writer's manifest.
	Writer    string `json:"writer"`
	Group     string `json:"group"`
	Topic     string `json:"topic"`
	Partition int    `json:"partition"`
	// Claim is set on manifests written by Claim (a copy of the restored
	// state under a new sequence, or an empty one).
	Claim bool `json:"claim,omitempty"`
	// Empty marks a claim made with no state to carry over; Restore skips it.
	Empty bool `json:"empty,omitempty"`

	InputOffset   int64                    `json:"input_offset"`
	OutputOffsets map[string]map[int]int64 `json:"output_offsets"`
	Filter        FilterParams             `json:"filter"`
	// Key is what defined the keys of this state (nil in manifests written
	// before it was recorded).
	Key *KeyIdentity `json:"key,omitempty"`
	// HashSeed is the memory's secret hash seed as 32 hex digits ("": the
	// unkeyed hash). Whoever reads the bucket reads it; it is never logged.
	HashSeed string `json:"hash_seed,omitempty"`
	// Isolation is the Kafka isolation level the state was built with
	// ("read_committed", "read_uncommitted"; "": not recorded, as in
	// manifests written before it was).
	Isolation   string          `json:"isolation,omitempty"`
	Generations []GenerationRef `json:"generations"`
	// EventTime is the owner's event-time frontier in Unix ns (0: not
	// recorded, as in manifests of earlier versions).
	EventTime int64 `json:"event_time_ns,omitempty"`
	// Seed is how far a new memory has read the topic it is seeded from
	// (--seed-topic); nil when there is none or it was read to its end.
	Seed *SeedProgress `json:"seed,omitempty"`
	// SeedingUntil is the start offset of a new group's partition whose
	// seeding of the input (--seed-from) is unfinished: the input before
	// it is remembered, not forwarded, so that a restart reports its
	// replay as seeding (0: none, or finished).
	SeedingUntil int64 `json:"seeding_until,omitempty"`
	// Exact is the exact store behind the filter (nil: filter only).
	Exact *ExactState `json:"exact,omitempty"`
	// Provenance is 1 when the records written under this state carry a
	// provenance header (0: written by a build from before them, whose
	// records the recovery scan accepts without one).
	Provenance int `json:"provenance,omitempty"`
	// LegacyProvenanceBefore is, per written topic and partition, the
	// offset below which records without a provenance header may still be
	// this memory's (written by an older build before an upgrade).
	LegacyProvenanceBefore map[string]map[int]int64 `json:"legacy_provenance_before,omitempty"`
	// InputMark is a data record of the input below InputOffset, by which
	// a later recovery tells whether the input's log is still the one this
	// state was built from (nil: none recorded).
	InputMark *InputMark `json:"input_mark,omitempty"`
}

// InputMark identifies one input record: offset, timestamp (Unix ms) and
// a digest of its key and value.
type InputMark struct {
	Offset    int64  `json:"offset"`
	Timestamp int64  `json:"timestamp_ms"`
	Digest    uint64 `json:"digest"`
}

// SeedProgress is the position of a seeding read of another topic: the
// state covers its records in [start, Next); the seeding ends at End.
type SeedProgress struct {
	Topic     string `json:"topic"`
	Partition int    `json:"partition"`
	Next      int64  `json:"next_offset"`
	End       int64  `json:"end_offset"`
}

// Bytes is the total stored size of the objects m references: generation
// objects and the exact store's files.
func (m *Manifest) Bytes() int64 {
	var n int64
	for _, g := range m.Generations {
		n += g.Bytes + g.LogBytes()
	}
	if m.Exact != nil {
		n += m.Exact.Bytes()
	}
	return n
}

// envelope is the stored manifest: the manifest and the SHA-256 of its
// compact JSON form, so that any change to a stored manifest is detected.
type envelope struct {
	Format   string          `json:"format"`
	Version  int             `json:"version"`
	SHA256   string          `json:"sha256"`
	Manifest json.RawMessage `json:"manifest"`
}

func encodeManifest(m *Manifest) ([]byte, error) {
	m.Version = m.formatVersion()
	body, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encoding manifest: %w", err)
	}
	sum := sha256.Sum256(body)
	out, err := json.MarshalIndent(envelope{Format: manifestFormat, Version: m.Version, SHA256: hex.EncodeToString(sum[:]), Manifest: body}, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding manifest: %w", err)
	}
	return append(out, '\n'), nil
}

// maxManifestBytes bounds what a reader accepts (a manifest is a few KB).
const maxManifestBytes = 4 << 20

// decodeManifest verifies and decodes a stored manifest. Every failure wraps
// ErrCorrupt.
func decodeManifest(data []byte) (*Manifest, error) {
	if len(data) > maxManifestBytes {
		return nil, fmt.Errorf("%w: manifest of %d bytes exceeds %d", ErrCorrupt, len(data), maxManifestBytes)
	}
	var env envelope
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&env); err != nil {
		return nil, fmt.Errorf("%w: manifest is not valid JSON: %w", ErrCorrupt, err)
	}
	if env.Format != manifestFormat {
		return nil, fmt.Errorf("%w: not a manifest (format %q)", ErrCorrupt, env.Format)
	}
	if env.Version < manifestVersionNoLog || env.Version > ManifestVersion {
		return nil, fmt.Errorf("%w: unknown manifest version %d (this build reads %d to %d)", ErrCorrupt, env.Version, manifestVersionNoLog, ManifestVersion)
	}
	// The checksum covers the compact form, so re-indenting a manifest by
	// hand or by a tool does not invalidate it; any change of content does.
	var compact bytes.Buffer
	if err := json.Compact(&compact, env.Manifest); err != nil {
		return nil, fmt.Errorf("%w: manifest body: %w", ErrCorrupt, err)
	}
	sum := sha256.Sum256(compact.Bytes())
	if hex.EncodeToString(sum[:]) != env.SHA256 {
		return nil, fmt.Errorf("%w: manifest checksum mismatch", ErrCorrupt)
	}
	var m Manifest
	if err := json.Unmarshal(env.Manifest, &m); err != nil {
		return nil, fmt.Errorf("%w: decoding manifest: %w", ErrCorrupt, err)
	}
	if m.Version != env.Version || m.Version != m.formatVersion() {
		return nil, fmt.Errorf("%w: manifest body version %d (envelope %d; its content is version %d)", ErrCorrupt, m.Version, env.Version, m.formatVersion())
	}
	if err := m.validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return &m, nil
}

func (m *Manifest) validate() error {
	if m.Seq == 0 {
		return errors.New("manifest sequence 0")
	}
	for i, g := range m.Generations {
		if err := g.validate(); err != nil {
			return fmt.Errorf("generation %d: %w", i, err)
		}
	}
	if e := m.Exact; e != nil {
		for i, f := range e.Files {
			if f.Name == "" || f.Size < 0 || len(f.SHA256) != 64 {
				return fmt.Errorf("exact store file %d: missing name, negative size or bad sha256", i)
			}
			if err := validRelKey(f.Key); err != nil || !strings.HasPrefix(f.Key, exactDir) {
				return fmt.Errorf("exact store file %d: object key %q outside %s", i, f.Key, exactDir)
			}
		}
	}
	return nil
}

// validate checks a generation's entry of a manifest.
func (g GenerationRef) validate() error {
	if g.IsLost() {
		// Restored empty: it names no object to read.
		if g.Key != "" || len(g.Log) > 0 || !g.End.After(g.Start) {
			return errors.New("lost, with an object or an empty range")
		}
		return nil
	}
	if g.Key == "" || g.Bytes < 0 || g.RawBytes < 0 {
		return errors.New("missing key or negative size")
	}
	if g.Encoding != encodingZstd && g.Encoding != encodingNone {
		return fmt.Errorf("unknown encoding %q", g.Encoding)
	}
	if len(g.SHA256) != 64 {
		return errors.New("bad sha256")
	}
	if err := validRelKey(g.Key); err != nil || strings.HasPrefix(g.Key, logsDir) {
		return fmt.Errorf("object key %q outside %s and %s", g.Key, gensDir, exactDir)
	}
	if len(g.Log) > 0 && g.Sealed {
		return errors.New("sealed with a log")
	}
	for _, e := range g.ExactGens {
		if e.End <= e.Start || e.Gen == 0 {
			return fmt.Errorf("exact generation %d of an empty range [%d, %d)", e.Gen, e.Start, e.End)
		}
	}
	for j, l := range g.Log {
		if l.Bytes < 0 || l.Entries < 0 || len(l.SHA256) != 64 {
			return fmt.Errorf("log segment %d: negative size or bad sha256", j)
		}
		if err := validRelKey(l.Key); err != nil || !strings.HasPrefix(l.Key, logsDir) {
			return fmt.Errorf("log segment %d: object key %q outside %s", j, l.Key, logsDir)
		}
	}
	return nil
}

// Object directories under a partition's directory.
const (
	gensDir  = "gens/"
	exactDir = "exact/"
	logsDir  = "logs/"
)

// objectDirs are the directories of the objects manifests name.
var objectDirs = []string{gensDir, exactDir, logsDir}

// validRelKey accepts the object keys a manifest may name: gens/…, exact/…
// and logs/…, lower-case letters, digits, '-' and '.'.
func validRelKey(k string) error {
	var rest string
	ok := false
	for _, d := range objectDirs {
		if rest, ok = strings.CutPrefix(k, d); ok {
			break
		}
	}
	if len(k) > 512 || !ok || rest == "" {
		return fmt.Errorf("object key %q outside %s", k, strings.Join(objectDirs, ", "))
	}
	for _, c := range []byte(rest) {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return fmt.Errorf("object key %q has unexpected characters", k)
		}
	}
	return nil
}

func jsonCompact(dst *bytes.Buffer, src []byte) error { return json.Compact(dst, src) }
