package deploy

import (
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
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

// TestStatusPageInChromium serves the status page with a running worker's
// status and checks what a browser renders.
func TestStatusPageInChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker, the binary and a browser; not in -short")
	}
	browser := chromium.Path(t)
	w := startWorker(t)
	srv := httptest.NewServer(statuspage.Handler(func() worker.Status {
		st, err := workerStatus(w.addr)
		if err != nil {
			return worker.Status{Error: fmt.Sprintf("reading the worker's status: %v", err)}
		}
		return st
	}))
	defer srv.Close()
	st, err := workerStatus(w.addr)
	if err != nil || len(st.Partitions) != 3 {
		t.Fatalf("worker status: %v, %d partitions", err, len(st.Partitions))
	}

	dom := string(headless(t, browser, srv.URL+"/", "--dump-dom"))
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

	shot := filepath.Join(t.TempDir(), "status.png")
	headless(t, browser, srv.URL+"/", "--hide-scrollbars", "--window-size=1500,420", "--screenshot="+shot)
	png, err := os.ReadFile(shot)
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) || len(png) < 10_000 {
		t.Fatalf("screenshot: %v, %d bytes", err, len(png))
	}
	if os.Getenv("BLOOMGATE_UPDATE_SCREENSHOT") == "1" {
		if err := os.WriteFile(filepath.Join(root, "docs/status-page.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
