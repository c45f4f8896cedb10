package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/filterplan"
	"github.com/prometheus/client_golang/prometheus"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

func goldenManifest() *Manifest {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	return &Manifest{
		Version: manifestVersionNoLog, Seq: 42, CreatedAt: t0.Add(90 * time.Second), Owner: "worker-1/4242", Writer: "a1b2c3d4e5f6",
		Group: "orders-dedup", Topic: "orders", Partition: 7,
		InputOffset:   123456,
		OutputOffsets: map[string]map[int]int64{"orders-unique": {7: 120001}, "orders-dups": {7: 3455}},
		Filter:        FilterParams{Params: filterplan.Params{Window: 24 * time.Hour, Generations: 4, Capacity: 10_000_000, FPR: 0.01}},
		Generations: []GenerationRef{
			{ID: 2461, Sealed: true, Start: t0.Add(-16 * time.Hour), End: t0.Add(-8 * time.Hour), Inserts: 3_400_000, EstKeys: 3_390_000,
				Fill: 0.41, EstFPR: 0.0021, Stacks: 1, Key: "gens/00000000000000002461-00000000000000000031-0f0e0d0c0b0a.gen",
				Encoding: "zstd", Bytes: 11_200_000, RawBytes: 12_000_000, CRC32C: "1c2d3e4f",
				SHA256: strings.Repeat("ab", 32), Seq: 31},
			{ID: 2462, Sealed: false, Start: t0.Add(-8 * time.Hour), End: t0, Inserts: 900_000, EstKeys: 899_000,
				Fill: 0.12, EstFPR: 0.00002, Stacks: 1, Key: "gens/00000000000000002462-00000000000000000042-a1b2c3d4e5f6.gen",
				Encoding: "zstd", Bytes: 4_100_000, RawBytes: 12_000_000, CRC32C: "5a6b7c8d",
				SHA256: strings.Repeat("cd", 32), Seq: 42},
		},
	}
}

// checkManifestGolden compares the encoding of the manifest build returns
// with testdata/file (rewritten with -update) and decodes the file back to
// that manifest; it returns the decoded manifest and the file's bytes.
func checkManifestGolden(t *testing.T, file string, build func() *Manifest) (*Manifest, []byte) {
	t.Helper()
	path := filepath.Join("testdata", file)
	got, err := encodeManifest(build())
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading golden file (run with -update to create): %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("manifest encoding changed; diff against %s:\n%s", path, got)
	}
	m, err := decodeManifest(want)
	if err != nil {
		t.Fatalf("decoding golden manifest: %v", err)
	}
	if !reflect.DeepEqual(m, build()) {
		t.Fatalf("golden manifest decodes to\n%+v\nwant\n%+v", m, build())
	}
	return m, want
}

// TestManifestGolden pins the stored manifest format: a change to it must be
// deliberate (run with -update and bump ManifestVersion if readers break).
func TestManifestGolden(t *testing.T) {
	checkManifestGolden(t, "manifest-v1.json", goldenManifest)
}

// settingsManifest is a manifest written after a settings change (window
// 24 h → 72 h, 4 generations): a legacy generation of the old plan (8 h
// span) next to one of the new plan (24 h span), and the optional records:
// key, hash seed, isolation level, event time.
func settingsManifest() *Manifest {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	m := goldenManifest()
	m.Seq = 43
	m.Filter = FilterParams{Params: filterplan.Params{Window: 72 * time.Hour, Generations: 4, Capacity: 30_000_000, FPR: 0.01}}
	m.Key = &KeyIdentity{Spec: "json:order_id", Normalize: "none", Hash: "murmur3-x64-128"}
	m.HashSeed = strings.Repeat("0f", 16)
	m.Isolation = "read_committed"
	m.EventTime = t0.Add(time.Hour).UnixNano()
	m.Generations = []GenerationRef{
		{ID: 61542, Sealed: true, Start: t0.Add(-8 * time.Hour), End: t0, Inserts: 900_000, EstKeys: 899_000,
			Fill: 0.12, EstFPR: 0.00002, Stacks: 0, Key: "gens/00000000000000061542-00000000000000000043-a1b2c3d4e5f6.gen",
			Encoding: "none", Bytes: 12_000_000, RawBytes: 12_000_000, CRC32C: "5a6b7c8d",
			SHA256: strings.Repeat("cd", 32), Seq: 43},
		{ID: 20513, Sealed: false, Start: t0.Add(-12 * time.Hour), End: t0.Add(12 * time.Hour),
			Inserts: 1000, EstKeys: 1000, Fill: 0.001, EstFPR: 0, Stacks: 0,
			Key:      "gens/00000000000000020513-00000000000000000043-a1b2c3d4e5f6.gen",
			Encoding: "none", Bytes: 36_000_000, RawBytes: 36_000_000, CRC32C: "01020304",
			SHA256: strings.Repeat("ef", 32), Seq: 43},
	}
	return m
}

// TestManifestSettingsGolden pins the optional records and generations of
// two plans in one manifest; both golden files decode with this build.
func TestManifestSettingsGolden(t *testing.T) {
	checkManifestGolden(t, "manifest-v1-settings.json", settingsManifest)
	old, err := os.ReadFile(filepath.Join("testdata", "manifest-v1.json"))
	if err != nil {
		t.Fatal(err)
	}
	if m, err := decodeManifest(old); err != nil || m.Key != nil || m.Isolation != "" || m.EventTime != 0 {
		t.Fatalf("manifest without the optional records: %v, key %v, isolation %q, event time %d", err, m.Key, m.Isolation, m.EventTime)
	}
}

// exactManifest is a manifest of exact mode: every generation names the
// exact store generation holding its keys (the legacy one none: it was
// filled before exact mode was on), and the exact section lists the
// store's files.
func exactManifest() *Manifest {
	m := settingsManifest()
	m.Seq = 44
	m.Generations[1].ExactGen = 3
	m.Exact = &ExactState{
		Layout: "bloomgate-exact-runs-v1", Floor: 3, NextGen: 4, Keys: 1000,
		Files: []ExactFile{
			{Name: "0000000000000003-0000000007.run", Size: 16028, SHA256: strings.Repeat("12", 32), Key: "exact/" + strings.Repeat("12", 32), Seq: 43},
			{Name: "MANIFEST", Size: 143, SHA256: strings.Repeat("34", 32), Key: "exact/" + strings.Repeat("34", 32), Seq: 44},
		},
	}
	return m
}

// TestManifestExactGolden pins the exact section and the generations'
// exact_generation.
func TestManifestExactGolden(t *testing.T) {
	checkManifestGolden(t, "manifest-v1-exact.json", exactManifest)
}

func TestManifestEmptyClaimGolden(t *testing.T) {
	path := filepath.Join("testdata", "manifest-v1-empty-claim.json")
	m := &Manifest{Version: manifestVersionNoLog, Seq: 1, CreatedAt: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC),
		Owner: "worker-2/7", Writer: "00ff00ff00ff", Group: "g", Topic: "t", Partition: 0, Claim: true, Empty: true}
	got, err := encodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("empty claim encoding changed:\n%s", got)
	}
}

func TestManifestDetectsChanges(t *testing.T) {
	good, err := os.ReadFile(filepath.Join("testdata", "manifest-v1.json"))
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]func([]byte) []byte{
		"value changed":     func(b []byte) []byte { return bytes.Replace(b, []byte("123456"), []byte("123457"), 1) },
		"truncated":         func(b []byte) []byte { return b[:len(b)/2] },
		"empty":             func([]byte) []byte { return nil },
		"future version":    func(b []byte) []byte { return bytes.Replace(b, []byte(`"version": 1,`), []byte(`"version": 2,`), 1) },
		"checksum replaced": func(b []byte) []byte { return bytes.Replace(b, []byte(`"sha256": "`), []byte(`"sha256": "0`), 1) },
		"not a manifest":    func([]byte) []byte { return []byte(`{"format":"something-else","version":1}`) },
	}
	for name, mutate := range cases {
		if _, err := decodeManifest(mutate(bytes.Clone(good))); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
	// Re-indenting keeps it valid: the checksum covers the compact form.
	var compact bytes.Buffer
	if err := jsonCompact(&compact, good); err != nil {
		t.Fatal(err)
	}
	if _, err := decodeManifest(compact.Bytes()); err != nil {
		t.Fatalf("compacted manifest: %v", err)
	}
}

func FuzzDecodeManifest(f *testing.F) {
	good, err := os.ReadFile(filepath.Join("testdata", "manifest-v1.json"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	for _, name := range []string{"manifest-v1-exact.json", "manifest-v1-partial.json"} {
		if ex, err := os.ReadFile(filepath.Join("testdata", name)); err == nil {
			f.Add(ex)
		}
	}
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"format":"bloomgate-checkpoint-manifest","version":1,"sha256":"","manifest":{}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := decodeManifest(data)
		if err != nil {
			if m != nil {
				t.Fatal("error with a manifest")
			}
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error not wrapping ErrCorrupt: %v", err)
			}
			return
		}
		if _, err := encodeManifest(m); err != nil {
			t.Fatalf("decoded manifest does not encode: %v", err)
		}
	})
}

func TestParseLocation(t *testing.T) {
	good := map[string]location{
		"mem://x":          {scheme: "mem", bucket: "x"},
		"file:///var/lib/": {scheme: "file", dir: "/var/lib/"},
		"s3://b/p/q?endpoint=http://127.0.0.1:9000&region=eu-west-1": {scheme: "s3", bucket: "b", prefix: "p/q"},
	}
	for raw, want := range good {
		got, err := parseLocation(raw)
		if err != nil {
			t.Errorf("%s: %v", raw, err)
			continue
		}
		if got.scheme != want.scheme || got.bucket != want.bucket || got.dir != want.dir || got.prefix != want.prefix {
			t.Errorf("%s: %+v", raw, got)
		}
	}
	for _, raw := range []string{"", "/tmp/x", "gs://b", "s3:///p", "file://host/dir", "file:relative", "s3://b?endpont=x", "mem://x?region=y"} {
		if _, err := parseLocation(raw); err == nil {
			t.Errorf("%q: accepted", raw)
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	bad := []Options{{Retain: -1}, {PartSize: 1 << 20}, {Compression: "gzip"}, {MaxAttempts: -2}, {UploadConcurrency: -1}}
	for _, o := range bad {
		if err := o.Validate(); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
	if err := (Options{}).Validate(); err != nil {
		t.Errorf("zero options: %v", err)
	}
}

func TestLayoutNames(t *testing.T) {
	if got := partitionDir("my group/1", "orders", 3); got != "my%20group%2F1/orders/3" {
		t.Fatalf("partitionDir = %q", got)
	}
	for _, name := range []string{"", ".", "..", "a/b", "ü", "%00"} {
		got, err := unescapeName(escapeName(name))
		if err != nil || got != name {
			t.Errorf("%q round-trips to %q (%v)", name, got, err)
		}
	}
	if seq, ok := parseManifestKey("g/t/0", manifestKey("g/t/0", 17)); !ok || seq != 17 {
		t.Fatalf("manifest key round trip: %d %v", seq, ok)
	}
}

// TestCommitSameIDOtherRange: after a settings change, a generation of the
// old plan and one of the new can share an ID (span indexes of different
// spans). Both are stored as separate objects, a sealed one is reused only
// with its own range, and both restore with their bytes.
func TestCommitSameIDOtherRange(t *testing.T) {
	ctx := t.Context()
	s := openT(t, "mem://", testOptions(prometheus.NewRegistry()))
	p := s.Partition("g", "t", 0)
	if err := p.Claim(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	legacy := gen(7, true, 1, 20_000) // [7 h, 8 h)
	ring := gen(7, false, 2, 30_000)
	ring.End = ring.Start.Add(2 * time.Hour) // [7 h, 9 h): same ID, other span
	st := state{offset: 10, gens: []Generation{legacy, ring}}
	m1, err := p.Commit(ctx, st.checkpoint())
	if err != nil {
		t.Fatal(err)
	}
	if m1.Generations[0].Key == m1.Generations[1].Key {
		t.Fatalf("two generations stored under one key %s", m1.Generations[0].Key)
	}
	restoreT(t, s, st)

	// Next commit: the ring generation is sealed now, under the same ID.
	ring.Sealed = true
	st = state{offset: 20, gens: []Generation{legacy, ring}}
	m2, err := p.Commit(ctx, st.checkpoint())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(m2.Generations[0], m1.Generations[0]) {
		t.Errorf("sealed legacy generation not reused: %+v", m2.Generations[0])
	}
	if m2.Generations[1].Seq != m2.Seq || !m2.Generations[1].End.Equal(ring.End) {
		t.Errorf("ring generation %+v: want it uploaded again with its own range", m2.Generations[1])
	}
	if c := legacy.Source.(*randSource).calls.Load(); c != 1 {
		t.Errorf("legacy generation written %d times, want once", c)
	}
	restoreT(t, s, st)
}

func logManifest() *Manifest {
	m := goldenManifest()
	live := &m.Generations[1]
	live.Inserts, live.EstKeys = 900_420, 899_410
	live.Log = []LogRef{
		{Key: "logs/" + strings.Repeat("1f", 32), Bytes: 6_320, SHA256: strings.Repeat("1f", 32), Entries: 390, Seq: 43},
		{Key: "logs/" + strings.Repeat("2e", 32), Bytes: 480, SHA256: strings.Repeat("2e", 32), Entries: 25, Seq: 44},
	}
	m.Seq = 44
	m.Version = manifestVersionLog
	return m
}

func fingerprintManifest() *Manifest {
	m := logManifest()
	m.Filter.Kind = FilterFingerprint
	m.Filter.Generations = 8
	for i := range m.Generations {
		m.Generations[i].Ages = []uint64{310_000, 320_400, 298_100}
	}
	m.Version = ManifestVersion
	return m
}

// TestManifestFingerprintGolden pins a manifest of the fingerprint filter:
// its kind and the tables' age histograms are recorded, and it is written
// as version 3 so that a build that knows only generations refuses it
// instead of decoding tables as generations. One claiming version 2, or
// naming an unknown kind, is refused here.
func TestManifestFingerprintGolden(t *testing.T) {
	m, want := checkManifestGolden(t, "manifest-v3-fingerprint.json", fingerprintManifest)
	if m.Filter.Kind != FilterFingerprint || len(m.Generations[0].Ages) != 3 {
		t.Errorf("kind %q, ages %v", m.Filter.Kind, m.Generations[0].Ages)
	}
	if !bytes.Contains(want, []byte(`"version": 3`)) || !bytes.Contains(want, []byte(`"kind": "fingerprint"`)) {
		t.Errorf("a fingerprint manifest is not written as version 3 with its kind")
	}
	for _, tc := range []struct {
		name    string
		version int
		kind    string
	}{{"version 2", manifestVersionLog, FilterFingerprint}, {"unknown kind", ManifestVersion, "cuckoo"}} {
		v := fingerprintManifest()
		v.Version = tc.version
		v.Filter.Kind = tc.kind
		if _, err := decodeManifest(forgeManifest(t, v)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: decoded: %v", tc.name, err)
		}
	}
}

// forgeManifest wraps m in a well-formed envelope of its version (a valid
// checksum), as a writer that skipped the encoder's checks would.
func forgeManifest(t *testing.T, m *Manifest) []byte {
	t.Helper()
	body, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(body)
	forged, err := json.Marshal(envelope{Format: manifestFormat, Version: m.Version, SHA256: hex.EncodeToString(sum[:]), Manifest: body})
	if err != nil {
		t.Fatal(err)
	}
	return forged
}

// fingerprintExactManifest is a fingerprint manifest of exact mode: each
// table names the exact store generation of every generation it holds
// (the two tables share the newest span, as a table that filled up and
// the one that took over do).
func fingerprintExactManifest() *Manifest {
	m := fingerprintManifest()
	m.Exact = exactManifest().Exact
	m.Exact.Floor, m.Exact.NextGen = 5, 9
	for i := range m.Generations {
		end := m.Generations[i].End.UnixNano()
		hour := int64(time.Hour)
		m.Generations[i].ExactGens = []ExactSpan{
			{Start: end - 3*hour, End: end - 2*hour, Gen: 6 + uint64(i)},
			{Start: end - 2*hour, End: end - hour, Gen: 7 + uint64(i)},
			{Start: end - hour, End: end, Gen: 8},
		}
	}
	return m
}

// TestManifestFingerprintExactGolden pins a table's exact_generations;
// one of an empty range or naming exact generation 0 is refused.
func TestManifestFingerprintExactGolden(t *testing.T) {
	m, _ := checkManifestGolden(t, "manifest-v3-fingerprint-exact.json", fingerprintExactManifest)
	if len(m.Generations[1].ExactGens) != 3 || m.Generations[1].ExactGens[2].Gen != 8 {
		t.Errorf("exact generations %+v", m.Generations[1].ExactGens)
	}
	for name, edit := range map[string]func(*ExactSpan){
		"empty range":  func(e *ExactSpan) { e.End = e.Start },
		"generation 0": func(e *ExactSpan) { e.Gen = 0 },
	} {
		v := fingerprintExactManifest()
		edit(&v.Generations[0].ExactGens[1])
		if _, err := decodeManifest(forgeManifest(t, v)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: decoded: %v", name, err)
		}
	}
}

// TestManifestLogGolden pins the log of a live generation; manifests
// without one (manifest-v1.json) decode as before, with no log.
func TestManifestLogGolden(t *testing.T) {
	m, want := checkManifestGolden(t, "manifest-v2-log.json", logManifest)
	if g := m.Generations[1]; g.Tail() != g.Log[1].Key || g.LogBytes() != 6_800 || g.LogEntries() != 415 {
		t.Errorf("chain of %+v: tail %s, %d bytes, %d entries", g, g.Tail(), g.LogBytes(), g.LogEntries())
	}
	if m.Bytes() != goldenManifest().Bytes()+6_800 {
		t.Errorf("manifest bytes %d do not count the log", m.Bytes())
	}
	// A build that reads only version 1 must refuse a manifest with a log
	// (it would load the base without the segments' keys): the envelope
	// says 2. And a manifest claiming version 1 with a log is refused here.
	if !bytes.Contains(want, []byte(`"version": 2`)) {
		t.Errorf("a manifest with a log is not written as version 2")
	}
	v1 := logManifest()
	v1.Version = manifestVersionNoLog
	if _, err := decodeManifest(forgeManifest(t, v1)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("a version 1 manifest with a log decoded: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(m *Manifest)
	}{
		{"segment outside logs/", func(m *Manifest) { m.Generations[1].Log[0].Key = "gens/x" }},
		{"base under logs/", func(m *Manifest) { m.Generations[1].Key = "logs/x" }},
		{"bad segment digest", func(m *Manifest) { m.Generations[1].Log[0].SHA256 = "ab" }},
		{"sealed with a log", func(m *Manifest) { m.Generations[0].Log = m.Generations[1].Log }},
	} {
		m := logManifest()
		tc.edit(m)
		data, err := encodeManifest(m)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := decodeManifest(data); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", tc.name, err)
		}
	}
}

// partialManifest is the claim of a partial restore: the sealed generation
// did not load and names no object (lost, with why), the live one loaded;
// both record their plan and where their keys begin in the input.
func partialManifest() *Manifest {
	m := goldenManifest()
	m.Seq = 45
	m.Claim = true
	m.EventTime = time.Date(2026, 3, 1, 11, 59, 0, 0, time.UTC).UnixNano()
	lost := m.Generations[0]
	lost.Capacity, lost.FPR = 3_333_334, 0.0025
	lost.KeysFrom = &KeysFrom{Offset: 98_000, EventTime: lost.Start.Add(-time.Minute).UnixNano(), NewestID: 2460, NewestSpan: int64(8 * time.Hour)}
	m.Generations[0] = lost.asLost("checkpoint data corrupt: object " + lost.Key + ": sha256 mismatch")
	live := &m.Generations[1]
	live.Capacity, live.FPR = 3_333_334, 0.0025
	live.KeysFrom = &KeysFrom{Offset: 119_000, EventTime: live.Start.Add(-time.Second).UnixNano(), NewestID: 2461, NewestSpan: int64(8 * time.Hour)}
	return m
}

// TestManifestPartialGolden pins the records of a partial restore. A lost
// generation is written with an empty object key, which builds from before
// partial restores refuse as corrupt (and fall back to older manifests):
// they never load a manifest without all of its generations.
func TestManifestPartialGolden(t *testing.T) {
	m, want := checkManifestGolden(t, "manifest-v1-partial.json", partialManifest)
	if !m.Generations[0].IsLost() || m.Generations[0].Tail() != "" || len(m.Generations[0].objects()) != 0 {
		t.Errorf("lost generation: %+v", m.Generations[0])
	}
	if !bytes.Contains(want, []byte(`"key": ""`)) || !bytes.Contains(want, []byte(`"version": 1`)) {
		t.Errorf("a lost generation is not written with an empty key in a version 1 manifest")
	}
	for _, tc := range []struct {
		name string
		edit func(m *Manifest)
	}{
		{"lost with an object", func(m *Manifest) { m.Generations[0].Key = "gens/x" }},
		{"lost with a log", func(m *Manifest) {
			m.Generations[0].Log = []LogRef{{Key: "logs/" + strings.Repeat("1f", 32), SHA256: strings.Repeat("1f", 32)}}
		}},
		{"lost without a range", func(m *Manifest) { m.Generations[0].End = m.Generations[0].Start }},
	} {
		m := partialManifest()
		tc.edit(m)
		data, err := encodeManifest(m)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := decodeManifest(data); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", tc.name, err)
		}
	}
}

// TestKeyIdentityURLRules: the URL rules are part of the key record
// without changing the record of a key without them: such a record is
// written as before (no url fields), and a record written before the
// rules existed reads as "no rules", the same identity.
func TestKeyIdentityURLRules(t *testing.T) {
	plain := KeyIdentity{Spec: "json:order_id", Normalize: "none", Hash: "murmur3-x64-128"}
	b, err := json.Marshal(plain)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"spec":"json:order_id","normalize":"none","hash":"murmur3-x64-128"}`; string(b) != want {
		t.Errorf("without rules: %s, want %s", b, want)
	}
	raw, err := os.ReadFile(filepath.Join("testdata", "manifest-v1-settings.json"))
	if err != nil {
		t.Fatal(err)
	}
	var old struct {
		Manifest struct {
			Key *KeyIdentity `json:"key"`
		} `json:"manifest"`
	}
	if err := json.Unmarshal(raw, &old); err != nil {
		t.Fatal(err)
	}
	if k := old.Manifest.Key; k == nil || *k != plain {
		t.Errorf("a record written before the rules: %+v, want %+v", k, plain)
	}
	ruled := plain
	ruled.Normalize, ruled.URLRules, ruled.URLStripParams = "url", "strip-www,strip-tracking", "ref,utm_*"
	b, err = json.Marshal(ruled)
	if err != nil {
		t.Fatal(err)
	}
	var back KeyIdentity
	if err := json.Unmarshal(b, &back); err != nil || back != ruled {
		t.Errorf("round trip %s: %+v, %v", b, back, err)
	}
	if back == plain {
		t.Error("rules do not change the identity")
	}
	if got, want := ruled.String(), "key json:order_id, normalize url, url rules strip-www,strip-tracking, url strip params ref,utm_*, hash murmur3-x64-128"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}
