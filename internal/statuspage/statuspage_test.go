package statuspage

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/worker"
)

// sampleStatus is a worker with one partition running, one scanning its
// outputs with a failing checkpoint, and one seeding; at now.
func sampleStatus(now time.Time) worker.Status {
	return worker.Status{
		Joined: true, Generation: 3, MemberID: "bloomgate-1234",
		Assigned: []int{0, 1, 2},
		Partitions: []worker.PartitionStatus{
			{Topic: "orders", Partition: 0, Generation: 3, State: "running", NextOffset: 120_000, Committed: 119_100, Lag: 7, Rate: 19_312.7,
				Consumed: 99_594, Forwarded: 79_500, Duplicates: 20_000, DeadLettered: 94, SkippedMarkers: 1_200, SkippedAborted: 3,
				Filter: worker.FilterStats{Bytes: 3 << 20, Fill: 0.25, EstFPR: 5.99e-05, EstKeys: 100_000, Generations: 4, ClampedTimestamps: 2,
					Exact: &worker.ExactStats{RefutedPositives: 1_234, Keys: 100_000, DiskBytes: 1_600_000}},
				LastCheckpoint: now.Add(-42 * time.Second), LastCheckpointOffset: 110_000, RecoverySeconds: 190},
			{Topic: "orders", Partition: 1, Generation: 3, State: "recovering", NextOffset: -1, Lag: 99, LSOLag: 12, Rate: 3.71e-05,
				Filter:               worker.FilterStats{Generations: 2, OverflowStacks: 1, Fill: 1.7, Ages: []uint64{4_100, 5_200}},
				LastCheckpointOffset: -1, CheckpointError: "s3: <access denied>", CommitsPaused: true,
				Progress: &worker.Progress{Phase: "scanning", From: 500, To: 500}},
			{Topic: "orders", Partition: 2, Generation: 3, State: "seeding", NextOffset: 0, Lag: -1,
				LastCheckpoint: now.Add(-2 * time.Hour), LastCheckpointOffset: -1,
				Progress: &worker.Progress{Phase: "seeding", From: 1_000, To: 501_000, Done: 210_000, Keys: 180_000, Rate: 19_300, ETASeconds: 15}},
		},
	}
}

var testNow = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func testHandler(st worker.Status) http.Handler {
	return handler(func() worker.Status { return st }, func() time.Time { return testNow })
}

func get(t *testing.T, h http.Handler, path string) *http.Response {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Result()
}

func TestPageShowsPartitions(t *testing.T) {
	resp := get(t, testHandler(sampleStatus(testNow)), "/")
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /: %d %s", resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
		t.Fatalf("content type %q", ct)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
		t.Fatalf("CSP %q", csp)
	}
	page := string(body)
	for _, want := range []string{
		`<meta http-equiv="refresh" content="5">`,
		`data-partition="0" data-topic="orders"`,
		`data-partition="1" data-topic="orders"`,
		`>orders partition</th>`, // one topic: named once, rows show the number
		`<td class="l name">0</td>`,
		`id="ready" class="bad">not ready<`,
		`id="ready-detail">2 of 3 partitions not running<`,
		`id="group-detail">group generation 3<`,
		"orders/1 recovering (scanning", "orders/2 seeding 42.0 %", // why not ready
		"19.3 k",          // rate
		"99.6 k", "100 k", // counts alike
		"+1.20 k skipped", // markers and aborted records
		`title="age histogram: entries per generation, oldest first: 4.10 k, 5.20 k">▇█<`, // the fingerprint filter's
		"94",                      // dead-lettered
		"25.0 %",                  // fill
		"0.006 %",                 // estimated FPR
		"3.00 MiB",                // filter memory
		"2 clamped", "1 overflow", // filter warnings
		"1.23 k refuted",            // exact mode: false positives avoided
		"42 s ago",                  // last checkpoint
		"<small>110000</small>",     // checkpointed offset
		"recovery 3 m 10 s",         // how long partition 0 took to recover
		"commits paused",            // partition 1
		"12 in open txn",            // partition 1 held at the LSO
		"none yet",                  // partition 1 has no checkpoint
		"s3: &lt;access denied&gt;", // escaped, not markup
		`style="width: 100.0%"`,     // fill bar clamped
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	// Self-contained: no external assets, no scripts.
	for _, bad := range []string{"<script", "src=", "<link", "http://", "https://", "ZgotmplZ", "e+0", "e-0", "NaN", "Inf"} {
		if strings.Contains(page, bad) {
			t.Errorf("page contains %q", bad)
		}
	}
}

// A partition that is not running yet shows its phase's progress in a
// second row.
func TestPageShowsProgress(t *testing.T) {
	body, _ := io.ReadAll(get(t, testHandler(sampleStatus(testNow)), "/").Body)
	page := string(body)
	seeding := page[strings.Index(page, `<tr class="more" data-partition="2">`):]
	seeding = seeding[:strings.Index(seeding, "</tr>")]
	for _, want := range []string{
		`>seeding<`, "input before the start position",
		`style="width: 42.0%"`, "<b>42.0 %</b>",
		"210 k of 500 k offsets (1000 → 501000)",
		"180 k keys", "19.3 k/s", "15 s left",
	} {
		if !strings.Contains(seeding, want) {
			t.Errorf("progress row lacks %q:\n%s", want, seeding)
		}
	}
	// An empty range, no rate: no percentage, no time left.
	scanning := page[strings.Index(page, `<tr class="more" data-partition="1">`):]
	scanning = scanning[:strings.Index(scanning, "</tr>")]
	for _, want := range []string{">scanning<", "0 offsets from 500", "0 keys", " 0/s", "time left unknown", "checkpoint failing: s3: &lt;access denied&gt;"} {
		if !strings.Contains(scanning, want) {
			t.Errorf("progress row lacks %q:\n%s", want, scanning)
		}
	}
	if strings.Contains(page, `<tr class="more" data-partition="0">`) {
		t.Error("a running partition with a working checkpoint has a second row")
	}
}

// TestPageSeparatesFillLag: input a seeding still reads into the filter
// is not lag to forward: the total lag counts only what waits to be
// forwarded, a card and the partition's lag cell say what is left to seed.
func TestPageSeparatesFillLag(t *testing.T) {
	st := worker.Status{
		Joined: true, Generation: 3, Assigned: []int{0, 1},
		Partitions: []worker.PartitionStatus{
			{Topic: "orders", Partition: 0, Generation: 3, State: "running", NextOffset: 9_000, Lag: 7, LastCheckpointOffset: -1},
			{Topic: "orders", Partition: 1, Generation: 3, State: "seeding", NextOffset: 860_000, ResumeOffset: 4_000_000,
				Lag: 3_140_400, FillLag: 3_140_000, LastCheckpointOffset: -1,
				Progress: &worker.Progress{Phase: "seeding", From: 0, To: 4_000_000, Done: 860_000, Keys: 800_000, Rate: 200_000, ETASeconds: 15.7}},
		},
	}
	body, _ := io.ReadAll(get(t, testHandler(st), "/").Body)
	page := string(body)
	for _, want := range []string{
		`<b id="total-lag">407</b><span>total lag (to forward)</span>`,
		`<b id="total-fill">3.14 M</b><span>offsets to seed or replay (not forwarded)</span>`,
		`<td>400<small class="fill"`, `>+3.14 M to seed</small>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	st.Partitions = st.Partitions[:1]
	body, _ = io.ReadAll(get(t, testHandler(st), "/").Body)
	if strings.Contains(string(body), `id="total-fill"`) {
		t.Error("a fill card without anything to seed or replay")
	}
}

// TestPageFilterMemoryPlannedAndAllocated: the filter memory card says
// what is allocated now against what is planned, which filters allocate as
// keys arrive.
func TestPageFilterMemoryPlannedAndAllocated(t *testing.T) {
	st := sampleStatus(testNow)
	st.PlannedFilterBytes = 21_300 << 10
	page, _ := io.ReadAll(get(t, testHandler(st), "/").Body)
	want := `<b id="filter-memory">3.00 MiB</b><span>filter memory allocated now<br>of 20.8 MiB planned (allocated as keys arrive)</span>`
	if !strings.Contains(string(page), want) {
		t.Errorf("page lacks %q", want)
	}
	st.PlannedFilterBytes = 0
	page, _ = io.ReadAll(get(t, testHandler(st), "/").Body)
	if strings.Contains(string(page), "planned") {
		t.Error("a plan shown where the store plans none")
	}
}

// stalledStatus is a ready worker with one partition running and one
// stalled before a record its output refuses, and one stalled for failing
// writes; at testNow.
func stalledStatus() worker.Status {
	return worker.Status{
		Ready: true, Joined: true, Generation: 3, Assigned: []int{0, 1, 2},
		Partitions: []worker.PartitionStatus{
			{Topic: "orders", Partition: 0, Generation: 3, State: "running", NextOffset: 500, LastCheckpointOffset: -1},
			{Topic: "orders", Partition: 1, Generation: 3, State: "stalled", NextOffset: 112, Lag: 51, LastCheckpointOffset: -1,
				Stalled: true, StalledSeconds: 185, LastError: `offset 112: the record for topic "out" is unwritable (record_too_large: <2097232> bytes)`,
				LastErrorAt: testNow.Add(-3 * time.Minute),
				Unwritable: &worker.Unwritable{Offset: 112, Topic: "out", Reason: "record_too_large", Size: 2097232,
					Since: testNow.Add(-3 * time.Minute), NextRetry: testNow.Add(20 * time.Second)}},
			{Topic: "orders", Partition: 2, Generation: 3, State: "failing", NextOffset: 40, Lag: 9, LastCheckpointOffset: -1,
				Stalled: true, StalledSeconds: 130, LastError: "writing 9 records: 9× [19] Not Enough Replicas"},
		},
	}
}

// TestPageShowsStalledPartitions: a stalled partition is named in a notice
// with its offset, for how long and its error, its state is marked, and a
// second row says where it stands; the worker stays ready.
func TestPageShowsStalledPartitions(t *testing.T) {
	body, _ := io.ReadAll(get(t, testHandler(stalledStatus()), "/").Body)
	page := string(body)
	notice := page[strings.Index(page, `id="stalled"`):]
	notice = notice[:strings.Index(notice, "</div>\n")]
	for _, want := range []string{
		"orders/1 stalled at offset 112, before the record at offset 112 (record_too_large, 2.00 MiB) that out does not take, 3 m 5 s with input waiting and no progress: offset 112",
		"&lt;2097232&gt;", // escaped
		"orders/2 failing at offset 40, 2 m 10 s with input waiting and no progress: writing 9 records: 9× [19] Not Enough Replicas",
	} {
		if !strings.Contains(notice, want) {
			t.Errorf("stalled notice lacks %q:\n%s", want, notice)
		}
	}
	if strings.Contains(notice, "orders/0") {
		t.Error("the running partition is listed as stalled")
	}
	for _, want := range []string{
		`id="ready" class="ok">ready<`, // a stalled partition does not make the worker unready
		`id="ready-detail">3 partitions, 2 stalled<`,
		`<span class="bad">stalled</span><small class="bad">stalled 3 m 5 s</small>`,
		`<div class="bad stalled">stalled at offset 112, before the record at offset 112: record_too_large, 2.00 MiB for out; next try in 20 s: offset 112`,
		`<div class="bad stalled">stalled at offset 40: writing 9 records`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Contains(page, `<tr class="more" data-partition="0">`) {
		t.Error("the running partition has a second row")
	}
	var back worker.Status
	if err := json.NewDecoder(get(t, testHandler(stalledStatus()), "/status.json").Body).Decode(&back); err != nil {
		t.Fatal(err)
	}
	if p := back.Partitions[1]; !p.Stalled || p.NextOffset != 112 || p.Unwritable == nil || p.Unwritable.Offset != 112 || p.LastError == "" {
		t.Errorf("status.json partition 1: %+v", p)
	}
}

// Generations a restore lost get a second row on a running partition:
// rebuilt (a warning), forgotten with the span and until when repeats are
// forwarded (an error), exact store lost (a warning).
func TestPageShowsLostGenerations(t *testing.T) {
	st := sampleStatus(testNow)
	start := time.Date(2026, 1, 1, 8, 0, 0, 0, time.UTC)
	lg := worker.LostGeneration{ID: 7, Start: start, End: start.Add(3 * time.Hour), Until: start.Add(9 * time.Hour), Keys: 12_345, Checkpoint: 41}
	rebuilt, forgotten, unverified := lg, lg, lg
	rebuilt.Outcome, forgotten.Outcome, unverified.Outcome = worker.LostRebuilt, worker.LostForgotten, worker.LostUnverified
	unverified.ExactOnly = true
	st.Partitions[0].Lost = []worker.LostGeneration{rebuilt, forgotten, unverified}
	body, _ := io.ReadAll(get(t, testHandler(st), "/").Body)
	page := string(body)
	i := strings.Index(page, `<tr class="more" data-partition="0">`)
	if i < 0 {
		t.Fatalf("no second row for the running partition with lost generations:\n%s", page)
	}
	more := page[i:]
	more = more[:strings.Index(more, "</tr>")]
	for _, want := range []string{
		`<div class="warn lost">generation 7 (event time 2026-01-01 08:00 UTC – 2026-01-01 11:00 UTC) of checkpoint 41 did not load: rebuilt from the input, nothing forgotten</div>`,
		`<div class="bad lost">generation 7 (event time 2026-01-01 08:00 UTC – 2026-01-01 11:00 UTC) of checkpoint 41 did not load and the input no longer holds its keys: 12.3 k keys forgotten, their repeats are forwarded until 2026-01-01 17:00 UTC</div>`,
		`<div class="warn lost">the exact store of checkpoint 41 did not load: positives matching generation 7 are unverified (the filter&#39;s answer stands) until 2026-01-01 17:00 UTC</div>`,
	} {
		if !strings.Contains(more, want) {
			t.Errorf("second row lacks\n%s\nin\n%s", want, more)
		}
	}
	js, _ := io.ReadAll(get(t, testHandler(st), "/status.json").Body)
	for _, want := range []string{`"lost_generations": [`, `"outcome": "forgotten"`, `"until": "2026-01-01T17:00:00Z"`, `"keys_from_offset": 0`} {
		if !strings.Contains(string(js), want) {
			t.Errorf("status.json lacks %s:\n%s", want, js)
		}
	}
}

func TestNotReady(t *testing.T) {
	running := worker.PartitionStatus{Topic: "orders", Partition: 0, Generation: 3, State: "running"}
	old := running
	old.Generation = 2
	for _, c := range []struct {
		name        string
		st          worker.Status
		long, short string
	}{
		{"ready", worker.Status{Ready: true, Joined: true, Generation: 3, Assigned: []int{0}, Partitions: []worker.PartitionStatus{running}},
			"", "1 partition running"},
		{"failed", worker.Status{Joined: true, Error: "committing: <boom>"},
			"the worker failed: committing: <boom>", "worker failed"},
		{"left the group", worker.Status{UnjoinedSeconds: 70.4},
			"not in a consumer group generation for 1 m 10 s; waiting for the group coordinator to complete a rebalance", "not in a group"},
		{"brokers down", worker.Status{UnjoinedSeconds: 12, JoinError: "no answer from the brokers (--brokers 10.0.0.1:9092): connection refused"},
			"not in a consumer group generation for 12 s; joining fails: no answer from the brokers (--brokers 10.0.0.1:9092): connection refused", "joining fails"},
		{"starting", worker.Status{},
			"joining the consumer group", "joining the group"},
		{"assigned, nothing started", worker.Status{Joined: true, Generation: 3, Assigned: []int{0, 1}},
			"2 of 2 partitions not running yet: partition 0 not started, partition 1 not started", "2 of 2 partitions not running"},
		{"previous generation", worker.Status{Joined: true, Generation: 3, Assigned: []int{0}, Partitions: []worker.PartitionStatus{old}},
			"1 of 1 partition not running yet: orders/0 running in generation 2", "1 of 1 partition not running"},
		{"many", worker.Status{Joined: true, Generation: 3, Assigned: []int{0, 1, 2, 3, 4, 5}},
			"6 of 6 partitions not running yet: partition 0 not started, partition 1 not started, partition 2 not started, partition 3 not started and 2 more",
			"6 of 6 partitions not running"},
		{"between assignment and first partition", worker.Status{Joined: true},
			"restoring partitions", "restoring partitions"},
	} {
		v := newView(c.st, testNow)
		if v.NotReady != c.long || v.Short != c.short {
			t.Errorf("%s: (%q, %q), want (%q, %q)", c.name, v.NotReady, v.Short, c.long, c.short)
		}
	}
}

func TestPageWhileNotJoined(t *testing.T) {
	body, _ := io.ReadAll(get(t, testHandler(worker.Status{UnjoinedSeconds: 190}), "/").Body)
	page := string(body)
	for _, want := range []string{`id="group" class="bad">not joined<`, `id="group-detail">for 3 m 10 s<`, `id="not-ready"`,
		"not in a consumer group generation for 3 m 10 s", `id="no-partitions"`} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q:\n%s", want, page)
		}
	}
}

func TestPageWithoutPartitions(t *testing.T) {
	body, _ := io.ReadAll(get(t, testHandler(worker.Status{Error: "consumer group: <boom>"}), "/").Body)
	page := string(body)
	for _, want := range []string{`id="no-partitions"`, "joining the consumer group", "not ready", "consumer group: &lt;boom&gt;"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q:\n%s", want, page)
		}
	}
}

func TestStatusJSONMatchesWorkerEncoding(t *testing.T) {
	want := sampleStatus(testNow)
	resp := get(t, testHandler(want), "/status.json")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /status.json: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	got, _ := io.ReadAll(resp.Body)
	// The worker's own /status.json encoding, byte for byte.
	var wantJSON bytes.Buffer
	enc := json.NewEncoder(&wantJSON)
	enc.SetIndent("", "  ")
	if err := enc.Encode(want); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, wantJSON.Bytes()) {
		t.Fatalf("status.json:\n%s\nwant\n%s", got, wantJSON.Bytes())
	}
	var back worker.Status
	if err := json.Unmarshal(got, &back); err != nil || len(back.Partitions) != 3 || back.Partitions[1].CheckpointError != "s3: <access denied>" ||
		back.Partitions[2].Progress == nil || back.Partitions[2].Progress.Keys != 180_000 {
		t.Fatalf("decoding status.json: %v %+v", err, back)
	}
}

// Every key of /status.json is snake_case, nested objects included. The
// status is filled by reflection, so that a field added later is checked
// too, omitempty ones included.
func TestStatusJSONSnakeCase(t *testing.T) {
	var st worker.Status
	fill(reflect.ValueOf(&st).Elem())
	body, _ := io.ReadAll(get(t, testHandler(st), "/status.json").Body)
	var doc any
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatalf("%v:\n%s", err, body)
	}
	snake := regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	keys := map[string]bool{}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				keys[k] = true
				if !snake.MatchString(k) {
					t.Errorf("%s.%s: key is not snake_case", path, k)
				}
				walk(path+"."+k, e)
			}
		case []any:
			for i, e := range x {
				walk(fmt.Sprintf("%s[%d]", path, i), e)
			}
		}
	}
	walk("", doc)
	// The walk reached the nested objects.
	for _, k := range []string{"unjoined_seconds", "error", "partitions", "filter", "clamped_timestamps", "progress", "eta_seconds", "recovery_seconds",
		"stalled", "stalled_seconds", "last_error", "last_error_at", "unwritable", "next_retry",
		"lost_generations", "keys_from_offset", "settings_conflicts", "differences", "foreign_members", "client_id", "holds", "unprocessed_partitions", "unprocessed_lag", "cross_partition", "repeats"} {
		if !keys[k] {
			t.Errorf("status.json lacks %q:\n%s", k, body)
		}
	}
}

// fill sets every settable field under v to a value other than its zero.
func fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(testNow))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i))
			}
		}
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem())
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(v.Index(0))
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k)
		fill(e)
		v.SetMapIndex(k, e)
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(1)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1.5)
	}
}

func TestOtherPathsAndMethods(t *testing.T) {
	h := testHandler(sampleStatus(testNow))
	if resp := get(t, h, "/metrics"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /metrics: %d, want 404 (left to the worker's handler)", resp.StatusCode)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST /: %d", rec.Code)
	}
}

// The documented mounting: the page next to the worker's own endpoints.
func TestMountNextToWorkerHandler(t *testing.T) {
	other := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(rw, "worker "+r.URL.Path) })
	mux := http.NewServeMux()
	mux.Handle("/", other)
	mux.Handle("GET /{$}", Handler(func() worker.Status { return sampleStatus(time.Now()) }))
	for path, want := range map[string]string{"/": "<!DOCTYPE html>", "/metrics": "worker /metrics", "/readyz": "worker /readyz"} {
		body, _ := io.ReadAll(get(t, mux, path).Body)
		if !strings.HasPrefix(string(body), want) {
			t.Errorf("GET %s: %.40q, want prefix %q", path, body, want)
		}
	}
}

// hostile is a value that would be markup, or leave an attribute, if the
// page wrote it unescaped.
const hostile = `<script>alert(1)</script>" onload="x' &amp;`

// randFill sets the fields under v at random: zero or not, strings from a
// few the page treats differently (phases, states) and hostile.
func randFill(r *rand.Rand, v reflect.Value) {
	switch v.Kind() {
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			if r.IntN(3) > 0 {
				v.Set(reflect.ValueOf(testNow.Add(time.Duration(r.IntN(7200)-3600) * time.Second)))
			}
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				randFill(r, v.Field(i))
			}
		}
	case reflect.Pointer:
		if r.IntN(2) == 0 {
			v.Set(reflect.New(v.Type().Elem()))
			randFill(r, v.Elem())
		}
	case reflect.Slice:
		n := r.IntN(4)
		v.Set(reflect.MakeSlice(v.Type(), n, n))
		for i := range n {
			randFill(r, v.Index(i))
		}
	case reflect.String:
		v.SetString([]string{"", "x", "seeding", "replaying", "running", hostile, "s3: <denied>"}[r.IntN(7)])
	case reflect.Bool:
		v.SetBool(r.IntN(2) == 0)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt([]int64{-1, 0, 1, 2, 12345, 3_000_000_123}[r.IntN(6)])
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint([]uint64{0, 1, 2, 999, 1_234_567}[r.IntN(5)])
	case reflect.Float32, reflect.Float64:
		v.SetFloat([]float64{0, 0.3, 1.5, 70.4, 0.0001}[r.IntN(5)])
	}
}

// TestPageEscapesEveryValue renders statuses with every field set at
// random, strings hostile among them: no value comes out as markup or
// leaves its attribute.
func TestPageEscapesEveryValue(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		var st worker.Status
		randFill(r, reflect.ValueOf(&st).Elem())
		var b bytes.Buffer
		render(&b, newView(st, testNow))
		page := b.String()
		for _, bad := range []string{"<script>", `" onload="`, "x' &amp;"} {
			if strings.Contains(page, bad) {
				t.Fatalf("status %d: %q unescaped in the page:\n%s", i, bad, page)
			}
		}
		if !strings.HasSuffix(page, "</html>\n") {
			t.Fatalf("status %d: page not complete", i)
		}
	}
}

// The consumer group's problems are named under the summary: a member
// that is not a bloomgate worker and what it holds, a member with other
// settings, the partitions no agreeing member processes.
func TestPageShowsGroupProblems(t *testing.T) {
	var st worker.Status
	if err := json.Unmarshal([]byte(`{"ready":true,"joined":true,"generation":7,"member_id":"bloomgate-1","assigned":[2,3],
		"foreign_members":[{"member":"peek-1","client_id":"rdkafka<x>","host":"10.0.0.9","holds":[0,1]}],
		"settings_conflicts":[{"member":"bloomgate-2","differences":["--window 2h0m0s here, 1h0m0s there"]}],
		"unprocessed_partitions":[0,1],"unprocessed_lag":1500,
		"cross_partition":{"repeats":12,"last":"2026-01-01T11:59:18Z","partitions":[3,5]}}`), &st); err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(get(t, testHandler(st), "/").Body)
	page := string(body)
	i := strings.Index(page, `id="group-problems"`)
	if i < 0 {
		t.Fatalf("no group notice:\n%s", page)
	}
	notice := page[i:]
	notice = notice[:strings.Index(notice, "</div>\n")]
	for _, want := range []string{
		"member peek-1 (client id rdkafka&lt;x&gt;, host 10.0.0.9) is not a bloomgate worker and holds partitions [0 1], consumed and committed without deduplication: give it its own group id",
		"member bloomgate-2 runs with other settings: --window 2h0m0s here, 1h0m0s there",
		"partitions [0 1] (1.50 k records waiting) are processed by no bloomgate worker",
	} {
		if !strings.Contains(notice, want) {
			t.Errorf("group notice lacks %q:\n%s", want, notice)
		}
	}
	if want := `<b>Input not keyed by the dedup key:</b> 12 sampled keys came again in another partition (the last in partitions 3 and 5, 42 s ago)`; !strings.Contains(page, want) {
		t.Errorf("page lacks %q", want)
	}
	body, _ = io.ReadAll(get(t, testHandler(sampleStatus(testNow)), "/").Body)
	if strings.Contains(string(body), `id="group-problems"`) || strings.Contains(string(body), `id="cross-partition"`) {
		t.Error("a group without problems gets the notice")
	}
}
