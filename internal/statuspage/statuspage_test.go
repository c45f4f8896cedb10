package statuspage

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/worker"
)

func sampleStatus() worker.Status {
	cp := time.Now().Add(-42 * time.Second)
	return worker.Status{
		Ready: true, Joined: true, Generation: 3, MemberID: "bloomgate-1234",
		Assigned: []int{0, 1},
		Partitions: []worker.PartitionStatus{
			{Topic: "orders", Partition: 0, Generation: 3, State: "running", NextOffset: 1200, Committed: 1100, Lag: 7, Rate: 512.5,
				Consumed: 1200, Forwarded: 1000, Duplicates: 180, DeadLettered: 20,
				Filter:         worker.FilterStats{Bytes: 3 << 20, Fill: 0.25, EstFPR: 0.0004, EstKeys: 1000, Generations: 4, OverflowStacks: 0},
				LastCheckpoint: cp, LastCheckpointOffset: 1100},
			{Topic: "orders", Partition: 1, Generation: 3, State: "recovering", NextOffset: -1, Lag: 99, LSOLag: 12,
				Filter:               worker.FilterStats{Generations: 2, OverflowStacks: 1, Fill: 1.7},
				LastCheckpointOffset: -1, CheckpointError: "s3: <access denied>", CommitsPaused: true},
		},
	}
}

func get(t *testing.T, h http.Handler, path string) *http.Response {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Result()
}

func TestPageShowsPartitions(t *testing.T) {
	h := Handler(sampleStatus)
	resp := get(t, h, "/")
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
		`<td class="l">orders/0</td>`,
		`>ready<`,
		"25.0 %",                    // fill
		"0.040 %",                   // estimated FPR
		"3.00 MiB",                  // filter memory
		"512",                       // rate
		"42 s ago",                  // last checkpoint
		"(offset 1100)",             // checkpointed offset
		"commits paused",            // partition 1
		"(12 in open transaction)",  // partition 1 held at the LSO
		"none yet",                  // partition 1 has no checkpoint
		"s3: &lt;access denied&gt;", // escaped, not markup
		`style="width: 100.0%"`,     // fill bar clamped
		`id="partition-count">2<`,
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

func TestPageWithoutPartitions(t *testing.T) {
	h := Handler(func() worker.Status { return worker.Status{Error: "consumer group: <boom>"} })
	resp := get(t, h, "/")
	body, _ := io.ReadAll(resp.Body)
	page := string(body)
	for _, want := range []string{`id="no-partitions"`, "joining the consumer group", "not ready", "consumer group: &lt;boom&gt;"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q:\n%s", want, page)
		}
	}
}

func TestStatusJSONMatchesWorkerEncoding(t *testing.T) {
	want := sampleStatus()
	resp := get(t, Handler(func() worker.Status { return want }), "/status.json")
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
	if err := json.Unmarshal(got, &back); err != nil || len(back.Partitions) != 2 || back.Partitions[1].CheckpointError != "s3: <access denied>" {
		t.Fatalf("decoding status.json: %v %+v", err, back)
	}
}

func TestOtherPathsAndMethods(t *testing.T) {
	h := Handler(sampleStatus)
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
	mux.Handle("GET /{$}", Handler(sampleStatus))
	for path, want := range map[string]string{"/": "<!DOCTYPE html>", "/metrics": "worker /metrics", "/readyz": "worker /readyz"} {
		body, _ := io.ReadAll(get(t, mux, path).Body)
		if !strings.HasPrefix(string(body), want) {
			t.Errorf("GET %s: %.40q, want prefix %q", path, body, want)
		}
	}
}
