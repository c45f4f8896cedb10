package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/broker"
	"github.com/bloomgate/bloomgate/internal/loadgen"
	"github.com/bloomgate/bloomgate/internal/proctest"
	"github.com/bloomgate/bloomgate/internal/worker"
)

// binary is bloomgate built by TestMain with a test version stamp.
var binary string

const testVersion = "v0.0.0-deploy-test"

func TestMain(m *testing.M) {
	code := proctest.Main(m, &binary, proctest.BuildOptions{
		Flags: []string{"-trimpath", "-ldflags", "-X github.com/bloomgate/bloomgate/internal/buildinfo.Version=" + testVersion},
		Env:   []string{"CGO_ENABLED=0"},
	})
	if stopShared != nil {
		stopShared()
	}
	os.Exit(code)
}

func binaryOutput(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(ctx, binary, args...).CombinedOutput()
	return string(out)
}

// runningWorker is `bloomgate run` against an in-process broker, with
// events produced and at least one checkpoint taken.
type runningWorker struct {
	addr   string // metrics/status endpoint
	proc   *proctest.Proc
	events int
}

var (
	workerOnce sync.Once
	shared     *runningWorker
	sharedErr  error
	stopShared func()
)

// startWorker starts one worker for the package's tests (they only read
// from it); it stops when the tests end.
func startWorker(t *testing.T) *runningWorker {
	t.Helper()
	workerOnce.Do(func() { shared, stopShared, sharedErr = launchWorker() })
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	return shared
}

func launchWorker() (_ *runningWorker, stop func(), err error) {
	ctx, cancel := context.WithCancel(context.Background())
	b, err := broker.New(broker.Config{
		Listen: "127.0.0.1:0",
		Topics: []broker.TopicSpec{{Name: "orders", Partitions: 3}, {Name: "orders-deduped", Partitions: 3}, {Name: "orders-dead-letter", Partitions: 1}},
	})
	if err != nil {
		cancel()
		return nil, nil, fmt.Errorf("starting broker: %w", err)
	}
	brokerDone := make(chan struct{})
	go func() { _ = b.Run(ctx); close(brokerDone) }()
	cleanup := func() {
		cancel()
		b.Close()
		<-brokerDone
	}

	dir, err := os.MkdirTemp("", "bloomgate-deploy-checkpoints")
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	w := &runningWorker{events: 3000}
	w.proc, err = proctest.Launch(proctest.Config{
		Name: "bloomgate run", Path: binary, Args: []string{"run",
			"--brokers", b.Addr(), "--input", "orders", "--output", "orders-deduped", "--dead-letter", "orders-dead-letter",
			"--key", "json:order_id", "--window", "1h", "--capacity", "30000",
			"--checkpoint-url", "file://" + dir, "--checkpoint-interval", "1s",
			"--metrics-addr", "127.0.0.1:0", "--batch-size", "2000", "--shutdown-timeout", "10s"},
		Env: slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "BLOOMGATE_") }),
	})
	if err != nil {
		cleanup()
		os.RemoveAll(dir)
		return nil, nil, err
	}
	stop = func() {
		_ = w.proc.KillWait(10 * time.Second)
		cleanup()
		os.RemoveAll(dir)
	}
	w.addr, err = w.proc.WaitFor(regexp.MustCompile(`msg="serving [^"]*/metrics[^"]*" addr=(\S+)`), 30*time.Second)
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("%w:\n%s", err, w.proc.Output())
	}

	// Events with 20 % duplicates; a few without a key for the dead-letter series.
	lctx, lcancel := context.WithTimeout(ctx, 30*time.Second)
	defer lcancel()
	if _, err := loadgen.Run(lctx, loadgen.Config{
		GenConfig: loadgen.GenConfig{Count: w.events, Duplicates: 0.2, Seed: 7},
		Brokers:   []string{b.Addr()}, Topic: "orders", BatchSize: 500,
	}); err != nil {
		stop()
		return nil, nil, fmt.Errorf("producing events: %w", err)
	}

	// Wait (bounded) until everything is processed and checkpointed.
	var (
		body      string
		scrapeErr error
	)
	err = w.proc.WaitUntil(fmt.Sprintf("consumption and checkpoint of %d events", w.events), 60*time.Second, 200*time.Millisecond, func() bool {
		body, scrapeErr = httpGet(w.addr, "/metrics")
		return scrapeErr == nil && sumOf(body, "bloomgate_records_consumed_total") == float64(w.events) &&
			minOf(body, "bloomgate_checkpoint_last_success_timestamp_seconds") > 0 &&
			sumOf(body, "bloomgate_checkpoint_duration_seconds_count") >= 3 &&
			minOf(body, "bloomgate_filter_generations") > 0 && statusSettled(w.addr)
	})
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("%w (last scrape: %v):\n%s\n%s", err, scrapeErr, body, w.proc.Output())
	}
	return w, stop, nil
}

// statusSettled: the worker's status shows every partition with filter
// statistics and a checkpointed offset (both refreshed periodically).
func statusSettled(addr string) bool {
	st, err := workerStatus(addr)
	if err != nil || len(st.Partitions) == 0 {
		return false
	}
	for _, p := range st.Partitions {
		if p.Filter.Generations == 0 || p.LastCheckpointOffset < 0 || p.LastCheckpoint.IsZero() {
			return false
		}
	}
	return true
}

func httpGet(addr, path string) (string, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return string(b), err
}

// samples returns the values of the series of one metric name.
func samples(exposition, name string) []float64 {
	var vals []float64
	for _, line := range strings.Split(exposition, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err == nil {
			vals = append(vals, v)
		}
	}
	return vals
}

func sumOf(exposition, name string) float64 {
	s := 0.0
	for _, v := range samples(exposition, name) {
		s += v
	}
	return s
}

func minOf(exposition, name string) float64 {
	vals := samples(exposition, name)
	if len(vals) == 0 {
		return 0
	}
	return slices.Min(vals)
}

// TestMetricNamesExported scrapes a running worker and checks that every
// metric the dashboard and the alert rules use is one it exports.
func TestMetricNamesExported(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker and the binary; not in -short")
	}
	w := startWorker(t)
	body, err := httpGet(w.addr, "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	fams := Families(body)
	refs := referencedMetrics(t)
	if len(refs) < 15 {
		t.Fatalf("only %d metric names found in the dashboard and rules: extractor broken?", len(refs))
	}
	for name, where := range refs {
		if !Exported(name, fams) {
			t.Errorf("%s (used by %s) is not exported by the binary", name, strings.Join(slices.Compact(where), ", "))
		}
	}
	// Every bloomgate_ family the worker exports is named in the metric
	// list of docs/operations.md, "Metrics and endpoints" (Go runtime and
	// process families are Prometheus' own).
	list := metricList(t)
	for name := range fams {
		short, ok := strings.CutPrefix(name, "bloomgate_")
		if ok && !strings.Contains(list, "`"+short) && !strings.Contains(list, name) {
			t.Errorf("%s is exported but the metric list of docs/operations.md does not name it", name)
		}
	}
	// The version stamped at build time is in bloomgate_build_info.
	if !strings.Contains(body, `bloomgate_build_info{goversion="`) || !strings.Contains(body, `version="`+testVersion+`"} 1`) {
		t.Errorf("bloomgate_build_info without version %s", testVersion)
	}
	if v := strings.TrimSpace(binaryOutput(t, "version")); !strings.Contains(v, testVersion) {
		t.Errorf("bloomgate version: %q", v)
	}
	// The data behind the panels moved.
	if f, d := sumOf(body, "bloomgate_records_forwarded_total"), sumOf(body, "bloomgate_records_duplicates_total"); f+d != float64(w.events) || d == 0 {
		t.Errorf("forwarded %v + duplicates %v != %d", f, d, w.events)
	}
	for _, probe := range []string{"/healthz", "/readyz"} {
		if _, err := httpGet(w.addr, probe); err != nil {
			t.Errorf("probe %s: %v", probe, err)
		}
	}
}

// workerStatus reads the running worker's own /status.json.
func workerStatus(addr string) (worker.Status, error) {
	var st worker.Status
	body, err := httpGet(addr, "/status.json")
	if err != nil {
		return st, err
	}
	err = json.Unmarshal([]byte(body), &st)
	return st, err
}

// metricList is the section "Metrics and endpoints" of docs/operations.md,
// up to the next section: the one list of the metric names.
func metricList(t *testing.T) string {
	t.Helper()
	doc := string(repoFile(t, "docs/operations.md"))
	_, sec, ok := strings.Cut(doc, "\n## Metrics and endpoints\n")
	if !ok {
		t.Fatal(`docs/operations.md has no section "## Metrics and endpoints"`)
	}
	if i := strings.Index(sec, "\n## "); i >= 0 {
		sec = sec[:i]
	}
	return sec
}
