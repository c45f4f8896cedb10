package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/proctest"
	"github.com/bloomgate/bloomgate/internal/statuspage"
	"github.com/bloomgate/bloomgate/internal/worker"
)

// chromium is Debian's headless-capable browser: $BLOOMGATE_CHROMIUM, else
// chromium on the PATH. Without it the test skips, or fails when
// BLOOMGATE_REQUIRE_TOOLS=1 (make test).
var chromium = proctest.Tool{
	Env:   "BLOOMGATE_CHROMIUM",
	Names: []string{"chromium", "chromium-browser"},
	Skip:  "chromium not found (apt-get install chromium, or set BLOOMGATE_CHROMIUM)",
	Fail:  "chromium not found (apt-get install chromium, or set BLOOMGATE_CHROMIUM) and BLOOMGATE_REQUIRE_TOOLS=1",
}

// headless runs one chromium invocation on url with extra flags and
// returns its stdout.
func headless(t *testing.T, browser, url string, extra ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := append([]string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
		"--user-data-dir=" + t.TempDir(),
	}, extra...)
	cmd := exec.CommandContext(ctx, browser, append(args, url)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %v: %v\n%s", extra, err, stderr.String())
	}
	return stdout.Bytes()
}

// screenshot renders url in a width×height window and returns the PNG.
func screenshot(t *testing.T, browser, url string, width, height int) []byte {
	t.Helper()
	shot := filepath.Join(t.TempDir(), "status.png")
	headless(t, browser, url, "--hide-scrollbars", fmt.Sprintf("--window-size=%d,%d", width, height), "--screenshot="+shot)
	png, err := os.ReadFile(shot)
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) || len(png) < 10_000 {
		t.Fatalf("screenshot at %d px: %v, %d bytes", width, err, len(png))
	}
	return png
}

// layoutProbe is appended to the page by withLayoutProbe: it reports, in a
// <pre id="layout">, the viewport width, the right edge of the widest
// element (inside scrolling containers too) and where the table would end
// at its narrowest.
const layoutProbe = `<script>
(() => {
  const d = document.documentElement;
  let right = 0, widest = "";
  for (const e of document.body.querySelectorAll("*")) {
    const r = e.getBoundingClientRect().right;
    if (r > right) { right = r; widest = e.tagName + (e.id ? "#" + e.id : "") + (e.className ? "." + e.className : ""); }
  }
  // How wide the table would be with nothing to fill: the room left.
  let tableMin = 0;
  const table = document.querySelector("table");
  if (table) {
    table.style.width = "min-content";
    tableMin = Math.ceil(table.getBoundingClientRect().right);
    table.style.width = "";
  }
  // The most lines a progress row takes.
  let progressLines = 0;
  for (const e of document.querySelectorAll(".progress")) {
    const lh = parseFloat(getComputedStyle(e).lineHeight) || 1;
    progressLines = Math.max(progressLines, Math.round(e.getBoundingClientRect().height / lh));
  }
  const p = document.createElement("pre");
  p.id = "layout";
  p.textContent = JSON.stringify({viewport: d.clientWidth, scroll_width: d.scrollWidth, right: Math.ceil(right), widest: widest, table_min_right: tableMin, progress_lines: progressLines});
  document.body.append(p);
})();
</script>`

// withLayoutProbe serves h with layoutProbe at the end of its HTML page
// and without the page's Content-Security-Policy, which forbids scripts.
// The page itself never has one.
func withLayoutProbe(h http.Handler) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		body := rec.Body.String()
		if strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html") {
			body = strings.Replace(body, "</body>", layoutProbe+"</body>", 1)
		}
		for k, v := range rec.Header() {
			if k != "Content-Security-Policy" {
				rw.Header()[k] = v
			}
		}
		rw.WriteHeader(rec.Code)
		_, _ = io.WriteString(rw, body)
	})
}

var layoutRE = regexp.MustCompile(`<pre id="layout">([^<]*)</pre>`)

// assertFits loads url (served through withLayoutProbe) in a window width
// pixels wide and fails t if anything reaches beyond the viewport, which
// would mean horizontal scrolling, of the page or of the table. The window
// is low enough for the page to scroll vertically: the scroll bar takes its
// width, as it does for a user with more partitions. It returns the
// rendered DOM.
func assertFits(t *testing.T, browser, url string, width int) string {
	t.Helper()
	dom := string(headless(t, browser, url, "--dump-dom", fmt.Sprintf("--window-size=%d,400", width)))
	m := layoutRE.FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("%d px: no layout report in the rendered page:\n%s", width, dom)
	}
	var l struct {
		Viewport    int    `json:"viewport"`
		ScrollWidth int    `json:"scroll_width"`
		Right       int    `json:"right"`
		Widest      string `json:"widest"`
		TableMin    int    `json:"table_min_right"`
		Lines       int    `json:"progress_lines"`
	}
	if err := json.Unmarshal([]byte(m[1]), &l); err != nil {
		t.Fatalf("%d px: layout report %q: %v", width, m[1], err)
	}
	// The viewport is the window less the vertical scroll bar.
	if l.Viewport > width-5 || l.Viewport < width-20 {
		t.Fatalf("%d px window: viewport %d px; is --window-size honoured?", width, l.Viewport)
	}
	t.Logf("%d px window: viewport %d px, document %d px, %s ends at %d px; the table at its narrowest at %d px",
		width, l.Viewport, l.ScrollWidth, l.Widest, l.Right, l.TableMin)
	if l.ScrollWidth > l.Viewport || l.Right > l.Viewport {
		t.Errorf("%d px window: page scrolls horizontally: viewport %d px, document %d px, %s ends at %d px",
			width, l.Viewport, l.ScrollWidth, l.Widest, l.Right)
	}
	if l.Lines > 1 {
		t.Errorf("%d px window: a progress row wraps to %d lines", width, l.Lines)
	}
	return dom
}

// TestStatusPageInChromium serves the status page with a running worker's
// status and checks what a browser renders, and that it fits 1280 px.
func TestStatusPageInChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker, the binary and a browser; not in -short")
	}
	browser := chromium.Path(t)
	w := startWorker(t)
	srv := httptest.NewServer(withLayoutProbe(statuspage.Handler(func() worker.Status {
		st, err := workerStatus(w.addr)
		if err != nil {
			return worker.Status{Error: fmt.Sprintf("reading the worker's status: %v", err)}
		}
		return st
	})))
	defer srv.Close()
	st, err := workerStatus(w.addr)
	if err != nil || len(st.Partitions) != 3 {
		t.Fatalf("worker status: %v, %d partitions", err, len(st.Partitions))
	}

	dom := assertFits(t, browser, srv.URL+"/", 1280)
	for _, want := range []string{
		`<title>bloomgate status</title>`,
		`id="ready" class="ok">ready<`,
		`id="ready-detail">3 partitions running<`,
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("rendered page lacks %q", want)
		}
	}
	for _, p := range st.Partitions {
		row := fmt.Sprintf(`data-partition="%d" data-topic="orders"`, p.Partition)
		if !strings.Contains(dom, row) || !strings.Contains(dom, fmt.Sprintf(`<td class="l name">%d</td>`, p.Partition)) {
			t.Errorf("rendered page lacks partition %d", p.Partition)
		}
		if p.LastCheckpoint.IsZero() || p.Filter.Generations == 0 {
			t.Errorf("partition %d: no checkpoint or generations in the worker status: %+v", p.Partition, p)
		}
	}
	if strings.Count(dom, "<tr data-partition=") != 3 {
		t.Errorf("want 3 partition rows:\n%s", dom)
	}
	screenshot(t, browser, srv.URL+"/", 1280, 420)
}

// pageFixture is a worker during a restart: eight partitions of a busy
// input, five running (one held behind an open upstream transaction, one
// whose checkpoints fail), one replaying its input after the checkpoint,
// one scanning its outputs and one restoring. Times are relative to now.
func pageFixture(now time.Time) worker.Status {
	running := func(p int, consumed uint64) worker.PartitionStatus {
		next := int64(3_041_000_000 + 1_317*p + int(consumed/1000))
		return worker.PartitionStatus{
			Topic: "orders", Partition: p, Generation: 7, State: "running",
			NextOffset: next, Committed: next - 2_412, Lag: int64(180 + 37*p), Rate: 4_270 + 61*float64(p),
			Consumed: consumed, Forwarded: consumed * 4 / 5, Duplicates: consumed/5 - 3, DeadLettered: 3,
			Filter: worker.FilterStats{Bytes: 96 << 20, Fill: 0.4312 + 0.01*float64(p), EstFPR: 5.99e-05 + 1e-6*float64(p),
				EstKeys: consumed * 4 / 5 * 3 / 4, Generations: 4},
			LastCheckpoint: now.Add(-42200 * time.Millisecond), LastCheckpointOffset: next - 198_000,
			RecoveryReplayed: 212_000, RecoverySkipped: 14, RecoverySeconds: 12.4,
		}
	}
	p0, p1, p2, p3, p7 := running(0, 18_412_993), running(1, 18_377_120), running(2, 18_502_761), running(3, 99_594), running(7, 18_440_212)
	p1.LSOLag, p1.SkippedMarkers, p1.SkippedAborted = 310, 1_204, 96
	p2.CheckpointError = "s3: PutObject checkpoints/orders/2/00000412.ckpt: AccessDenied: Access Denied (status 403)"
	p2.CommitsPaused, p2.LastCheckpoint, p2.Lag = true, now.Add(-190*time.Second), 38_120
	p3.Rate, p3.Lag, p3.RecoverySeconds, p3.RecoveryReplayed = 3.71e-05, 0, 0.4, 0
	p3.Filter = worker.FilterStats{Bytes: 96 << 20, Fill: 0.0021, EstFPR: 1.2e-12, EstKeys: 74_201, Generations: 1}
	p3.LastCheckpoint = now.Add(-3 * time.Second)
	p7.Dropped, p7.DeadLettered, p7.Filter.OverflowStacks, p7.Filter.ClampedTimestamps = 2, 41, 1, 17
	// The fingerprint filter: its age histogram beside the fill.
	p7.Filter.Generations = 8
	p7.Filter.Ages = []uint64{2_301_556, 2_287_310, 2_296_004, 2_310_981, 2_278_122, 2_305_740, 2_299_117, 960_215}

	replaying := worker.PartitionStatus{
		Topic: "orders", Partition: 4, Generation: 7, State: "replaying",
		NextOffset: 3_015_218_440, Committed: 3_017_200_000, Lag: 23_907_344,
		Filter:         worker.FilterStats{Bytes: 96 << 20, Fill: 0.2871, EstFPR: 8.1e-06, EstKeys: 9_812_406, Generations: 4},
		LastCheckpoint: now.Add(-2*time.Hour - 4*time.Minute), LastCheckpointOffset: 3_012_000_000,
		Progress: &worker.Progress{Phase: "replaying", From: 3_012_000_000, To: 3_017_200_000, Done: 3_218_440,
			Keys: 2_571_300, Rate: 48_310, ETASeconds: 41.0},
	}
	scanning := worker.PartitionStatus{
		Topic: "orders", Partition: 5, Generation: 7, State: "recovering",
		NextOffset: 3_040_980_112, Committed: 3_040_980_112, Lag: 61_540,
		Filter:         worker.FilterStats{Bytes: 96 << 20, Fill: 0.4402, EstFPR: 6.3e-05, EstKeys: 11_020_512, Generations: 4},
		LastCheckpoint: now.Add(-58 * time.Second), LastCheckpointOffset: 3_040_791_002,
		Progress: &worker.Progress{Phase: "scanning", From: 7_120_400, To: 7_124_900, Done: 1_830,
			Rate: 2_110, ETASeconds: 1.3},
	}
	restoring := worker.PartitionStatus{
		Topic: "orders", Partition: 6, Generation: 7, State: "restoring",
		NextOffset: -1, Committed: 3_040_912_400, Lag: 58_211, LastCheckpointOffset: -1,
	}
	return worker.Status{
		Joined: true, Generation: 7, MemberID: "bloomgate-5c9f7d8b6-xq2tz-6f1e0c5a-8d34-4b1f-9a57-2e7c1d0b9f43",
		Assigned:   []int{0, 1, 2, 3, 4, 5, 6, 7},
		Partitions: []worker.PartitionStatus{p0, p1, p2, p3, replaying, scanning, restoring, p7},
	}
}

// TestStatusPageFitsInChromium renders pageFixture at 1280 and 1920 px:
// nothing may scroll horizontally. BLOOMGATE_UPDATE_SCREENSHOT=1 writes
// the screenshots docs/deploy.md shows.
func TestStatusPageFitsInChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser four times; not in -short")
	}
	browser := chromium.Path(t)
	page := statuspage.Handler(func() worker.Status { return pageFixture(time.Now()) })
	probed := httptest.NewServer(withLayoutProbe(page))
	defer probed.Close()
	plain := httptest.NewServer(page)
	defer plain.Close()

	// A seeding, whose explanation is the longest, with what it still
	// reads into the filter besides its lag.
	seeding := statuspage.Handler(func() worker.Status {
		st := pageFixture(time.Now())
		p := &st.Partitions[4]
		p.State, p.ResumeOffset, p.FillLag = "seeding", 3_017_200_000, 1_981_560
		p.Progress.Phase = "seeding"
		return st
	})
	seedingProbed := httptest.NewServer(withLayoutProbe(seeding))
	defer seedingProbed.Close()
	dom := assertFits(t, browser, seedingProbed.URL+"/", 1280)
	for _, want := range []string{"input before the start position", "+1.98 M to seed", "total lag (to forward)"} {
		if !strings.Contains(dom, want) {
			t.Errorf("1280 px, seeding: rendered page lacks %q", want)
		}
	}

	for _, width := range []int{1280, 1920} {
		dom := assertFits(t, browser, probed.URL+"/", width)
		for _, want := range []string{`id="not-ready"`, `class="more" data-partition="4"`, "replaying", "61.9 %", "48.3 k/s", "41 s left", "███████▄"} {
			if !strings.Contains(dom, want) {
				t.Errorf("%d px: rendered page lacks %q", width, want)
			}
		}
		png := screenshot(t, browser, plain.URL+"/", width, 900)
		if os.Getenv("BLOOMGATE_UPDATE_SCREENSHOT") == "1" {
			name := fmt.Sprintf("docs/status-page-%d.png", width)
			if err := os.WriteFile(filepath.Join(root, name), png, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}
