package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/bloom"
	"github.com/bloomgate/bloomgate/internal/broker"
	"github.com/bloomgate/bloomgate/internal/checkpoint"
	"github.com/bloomgate/bloomgate/internal/filterplan"
	"github.com/bloomgate/bloomgate/internal/preflight"
)

// checkBroker is an embedded broker with orders and orders-unique (2
// partitions each) and orders-small, whose max.message.bytes is 1000.
func checkBroker(t *testing.T) string {
	t.Helper()
	b, err := broker.New(broker.Config{Listen: "127.0.0.1:0", Topics: []broker.TopicSpec{
		{Name: "orders", Partitions: 2}, {Name: "orders-unique", Partitions: 2},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	if err := b.Cluster().CreateTopic("orders-small", 2, map[string]string{"max.message.bytes": "1000"}); err != nil {
		t.Fatal(err)
	}
	return b.Addr()
}

// writeKeyedCheckpoints commits a checkpoint for both partitions of group
// g / topic orders below dir, as a worker with key json:order_id, window
// 24h and 4 generations records it.
func writeKeyedCheckpoints(t *testing.T, dir string) {
	t.Helper()
	writeCheckpointsKeyed(t, dir, checkpoint.KeyIdentity{Spec: "json:order_id", Normalize: "none", Hash: bloom.HashName})
}

// writeCheckpointsKeyed is writeKeyedCheckpoints with the key definition
// key.
func writeCheckpointsKeyed(t *testing.T, dir string, key checkpoint.KeyIdentity) {
	t.Helper()
	ctx := context.Background()
	store, err := checkpoint.Open(ctx, "file://"+dir, checkpoint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for p := range 2 {
		part := store.Partition("g", "orders", p)
		if err := part.Claim(ctx, "test/1"); err != nil {
			t.Fatal(err)
		}
		_, err := part.Commit(ctx, checkpoint.Checkpoint{
			InputOffset: 1000, OutputOffsets: map[string]map[int]int64{"orders-unique": {p: 800}},
			Filter:    checkpoint.FilterParams{Params: filterplan.Params{Window: 24 * time.Hour, Generations: 4, Capacity: 5_000_000, FPR: 0.01}},
			Key:       &key,
			Isolation: "read_committed", Owner: "test/1",
			Generations: []checkpoint.Generation{{ID: 7, Start: start, End: start.Add(8 * time.Hour), Inserts: 800, EstKeys: 800,
				Fill: 0.1, EstFPR: 0.001, Source: bytesSource(bytes.Repeat([]byte{1}, 4096))}},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// checkNormalizer replaces what differs between runs: the broker's port,
// the temporary directory and the user ID.
func checkNormalizer(addr, dir string) func(string) string {
	uid := regexp.MustCompile(`\buid \d+|chown \d+`)
	return func(s string) string {
		s = strings.ReplaceAll(s, addr, "127.0.0.1:PORT")
		s = strings.ReplaceAll(s, dir, "/DIR")
		return uid.ReplaceAllStringFunc(s, func(m string) string { return strings.Fields(m)[0] + " UID" })
	}
}

// runCheck runs `bloomgate check` in-process with no memory limit.
func runCheck(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return runCheckWith(t, preflight.Options{MemoryLimit: func() uint64 { return 0 }}, args...)
}

func runCheckWith(t *testing.T, opts preflight.Options, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	checkOptions = opts
	t.Cleanup(func() { checkOptions = preflight.Options{} })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	code = run(ctx, append([]string{"check", "--metrics-addr", ""}, args...), &out, &errb)
	return out.String(), errb.String(), code
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("%s differs (rerun with -update to rewrite it):\n%s", path, got)
	}
}

// TestCheckPasses: default settings against existing topics and an empty
// file:// location: every check passes, exit 0, as text and as JSON; then
// against checkpoints written with the same key and another window.
func TestCheckPasses(t *testing.T) {
	addr := checkBroker(t)
	dir := t.TempDir()
	norm := checkNormalizer(addr, dir)
	args := []string{"--brokers", addr, "--input", "orders", "--output", "orders-unique", "--checkpoint-url", "file://" + dir + "/ck"}
	out, errOut, code := runCheck(t, args...)
	if code != exitOK {
		t.Fatalf("exit %d, want 0:\n%s%s", code, out, errOut)
	}
	golden(t, "check-ok.txt", norm(out))

	out, _, code = runCheck(t, append([]string{"--json"}, args...)...)
	if code != exitOK {
		t.Fatalf("--json: exit %d, want 0", code)
	}
	var rep preflight.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil || !rep.OK {
		t.Fatalf("--json: %v, ok=%v:\n%s", err, rep.OK, out)
	}
	golden(t, "check-ok.json", norm(out))
	if _, err := os.Stat(filepath.Join(dir, "ck", "_probe")); err != nil {
		t.Errorf("the create-only probe left no trace of having run in the location: %v", err)
	}

	// Checkpoints written with the same key and another window: the
	// change is listed, carried over, and a warning.
	writeKeyedCheckpoints(t, dir)
	out, errOut, code = runCheck(t, "--brokers", addr, "--group", "g", "--input", "orders", "--output", "orders-unique",
		"--key", "json:order_id", "--window", "48h", "--checkpoint-url", "file://"+dir)
	if code != exitOK {
		t.Fatalf("checkpointed: exit %d, want 0:\n%s%s", code, out, errOut)
	}
	golden(t, "check-ok-checkpointed.txt", norm(out))
}

// TestCheckFails: a missing topic, an output whose max.message.bytes is
// below the input's (no dead-letter topic: such a record would stall its
// partition), and checkpoints written with another --key; each is named
// with its fix, and the exit code is 1.
func TestCheckFails(t *testing.T) {
	addr := checkBroker(t)
	dir := t.TempDir()
	writeKeyedCheckpoints(t, dir)
	norm := checkNormalizer(addr, dir)
	args := []string{"--brokers", addr, "--group", "g", "--input", "orders", "--output", "orders-small", "--duplicates", "orders-dup",
		"--key", "json:id", "--checkpoint-url", "file://" + dir}
	out, errOut, code := runCheck(t, args...)
	if code != exitRuntime {
		t.Fatalf("exit %d, want 1:\n%s%s", code, out, errOut)
	}
	golden(t, "check-fail.txt", norm(out))
	out, _, code = runCheck(t, append([]string{"--json"}, args...)...)
	if code != exitRuntime {
		t.Fatalf("--json: exit %d, want 1", code)
	}
	golden(t, "check-fail.json", norm(out))
	var rep preflight.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	failed := map[string]bool{}
	for _, c := range rep.Checks {
		if c.Status == preflight.Fail {
			failed[c.Name+" "+c.Subject] = true
		}
	}
	for _, want := range []string{"topic --duplicates orders-dup", "max.message.bytes --output orders-small", "checkpoints g/orders"} {
		if !failed[want] {
			t.Errorf("%q did not fail: %v", want, failed)
		}
	}
	if len(failed) != 3 || rep.Failures != 3 || rep.OK {
		t.Errorf("failures %v (count %d, ok %v), want exactly the three above", failed, rep.Failures, rep.OK)
	}
}

// TestCheckURLRulesChanged: URL rules are part of the key definition:
// checkpoints written without them fail the checkpoints check of settings
// with them, naming both, and pass without them.
func TestCheckURLRulesChanged(t *testing.T) {
	addr := checkBroker(t)
	dir := t.TempDir()
	writeCheckpointsKeyed(t, dir, checkpoint.KeyIdentity{Spec: "json:url", Normalize: "url", Hash: bloom.HashName})
	args := []string{"--json", "--brokers", addr, "--group", "g", "--input", "orders", "--output", "orders-unique",
		"--key", "json:url", "--normalize", "url", "--checkpoint-url", "file://" + dir}
	row := func(args ...string) preflight.Check {
		t.Helper()
		out, errOut, _ := runCheck(t, args...)
		var rep preflight.Report
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("%v: %s%s", err, out, errOut)
		}
		for _, c := range rep.Checks {
			if c.Name == "checkpoints" {
				return c
			}
		}
		t.Fatalf("no checkpoints row: %s", out)
		return preflight.Check{}
	}
	if c := row(args...); c.Status != preflight.OK {
		t.Errorf("the recorded settings: %+v", c)
	}
	c := row(append(args, "--url-rules", "crawler")...)
	if c.Status != preflight.Fail || !strings.Contains(c.Detail, "--url-rules strip-userinfo,strip-www,strip-session-ids") ||
		!strings.Contains(c.Fix, "without --url-rules") {
		t.Errorf("rules turned on: %+v", c)
	}
}

// TestCheckReadOnlyCheckpointDir: a checkpoint directory this process may
// not write fails the store check, naming --checkpoint-url and the fix.
// As root (who may write anywhere) the binary runs as user nobody.
func TestCheckReadOnlyCheckpointDir(t *testing.T) {
	addr := checkBroker(t)
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck")
	if err := os.Mkdir(ck, 0o755); err != nil {
		t.Fatal(err)
	}
	norm := checkNormalizer(addr, dir)
	args := []string{"--brokers", addr, "--input", "orders", "--output", "orders-unique", "--checkpoint-url", "file://" + ck}
	var out string
	var code int
	if os.Geteuid() != 0 {
		if err := os.Chmod(ck, 0o555); err != nil {
			t.Fatal(err)
		}
		var errOut string
		if out, errOut, code = runCheck(t, args...); code != exitRuntime {
			t.Fatalf("exit %d, want 1:\n%s%s", code, out, errOut)
		}
	} else {
		var errOut string
		out, errOut, code = asNobody(t, dir, append([]string{"check", "--metrics-addr", ""}, args...)...)
		if errOut != "" {
			t.Logf("stderr: %s", errOut)
		}
	}
	out = regexp.MustCompile(`; memory limit [^\n]*`).ReplaceAllString(out, "") // the binary reads its cgroup's limit
	if code != exitRuntime {
		t.Fatalf("exit %d, want 1:\n%s", code, out)
	}
	golden(t, "check-readonly.txt", norm(out))
}

// asNobody runs the built binary with args as user nobody (65534), from a
// copy it may execute, in dir (made traversable for it).
func asNobody(t *testing.T, dir string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	for d := dir; d != os.TempDir() && d != "/" && d != "."; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "bloomgate")
	b, err := os.ReadFile(binary)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + dir}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("running %v as nobody: %v\n%s", args, err, errb.String())
	}
	return out.String(), errb.String(), code
}

// TestCheckUsage: check's own flags and a bad setting.
func TestCheckUsage(t *testing.T) {
	out, _, code := runCheck(t, "--help")
	if code != exitOK || !strings.Contains(out, "Usage: bloomgate check") || !strings.Contains(out, "--checkpoint-url") {
		t.Errorf("--help: exit %d:\n%s", code, out)
	}
	_, errOut, code := runCheck(t, "--timeout", "soon")
	if code != exitUsage || !strings.Contains(errOut, "--timeout") {
		t.Errorf("--timeout soon: exit %d: %s", code, errOut)
	}
	_, errOut, code = runCheck(t, "--brokers", "127.0.0.1:1", "--input", "a", "--output", "a")
	if code != exitUsage || !strings.Contains(errOut, "bloomgate check:") {
		t.Errorf("equal input and output: exit %d: %s", code, errOut)
	}
}

// TestCheckExactDir: with --exact, the directory must be writable and hold
// the planned stores: room for all partitions passes, for one but not all
// warns, for none fails; a missing directory is judged by its nearest
// existing parent (run creates the rest).
func TestCheckExactDir(t *testing.T) {
	addr := checkBroker(t)
	dir := t.TempDir()
	// 5M keys per window over 2 partitions, 4 generations: 2.5M keys per
	// partition, 16 B per key of 5 generations' worth over 3 = 66.7 MB.
	const perPartition = 16 * 2_500_000 * 5 / 3
	for _, tc := range []struct {
		free   uint64
		status preflight.Status
	}{{2 * perPartition, preflight.OK}, {perPartition, preflight.Warn}, {perPartition - 1, preflight.Fail}} {
		opts := preflight.Options{MemoryLimit: func() uint64 { return 0 }, FreeBytes: func(string) (uint64, error) { return tc.free, nil }}
		out, _, _ := runCheckWith(t, opts, "--json", "--brokers", addr, "--input", "orders", "--output", "orders-unique",
			"--capacity", "5M", "--exact", "--exact-dir", filepath.Join(dir, "not", "yet"), "--checkpoint-url", "file://"+dir+"/ck")
		var rep preflight.Report
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatal(err)
		}
		got := rep.Checks[len(rep.Checks)-1]
		if got.Name != "exact-dir" || got.Status != tc.status {
			t.Errorf("%d bytes free: %+v, want status %s", tc.free, got, tc.status)
		}
	}
}

// TestCheckUnreachableBrokers: brokers that do not answer fail the check
// at --timeout, saying so, while the checkpoint store is still checked.
func TestCheckUnreachableBrokers(t *testing.T) {
	start := time.Now()
	out, _, code := runCheck(t, "--json", "--timeout", "2s", "--brokers", "127.0.0.1:1", "--input", "a", "--output", "b", "--checkpoint-url", "mem://check-unreachable")
	if took := time.Since(start); code != exitRuntime || took > 10*time.Second {
		t.Fatalf("exit %d after %s, want 1 within the bound:\n%s", code, took, out)
	}
	var rep preflight.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	status := map[string]preflight.Status{}
	for _, c := range rep.Checks {
		status[c.Name] = c.Status
		if c.Name == "brokers" && !strings.Contains(c.Detail, "the check's time bound ended the retries") {
			t.Errorf("brokers: %q", c.Detail)
		}
	}
	if status["brokers"] != preflight.Fail || status["checkpoint store"] != preflight.OK || status["topics"] != preflight.Skip {
		t.Errorf("statuses %v", status)
	}
}

// TestRunKeyChanged: `bloomgate run` with another --key than the
// checkpoints record stops before joining the group with exit code 2 and
// one ERROR line for the process, pinned by testdata/run-key-changed.txt:
// the partitions, both settings as flags and the fix, in the words of
// check's checkpoints row (TestCheckFails).
func TestRunKeyChanged(t *testing.T) {
	addr := checkBroker(t)
	dir := t.TempDir()
	writeKeyedCheckpoints(t, dir)
	stderr, code := runBinary(t, dir, storeErrorEnv(dir), "run", "--brokers", addr, "--group", "g", "--input", "orders", "--output", "orders-unique",
		"--key", "json:id", "--checkpoint-url", "file://"+dir, "--metrics-addr", "", "--log-level", "warn")
	if code != exitUsage {
		t.Errorf("exit %d, want %d:\n%s", code, exitUsage, stderr)
	}
	if n := strings.Count(stderr, "level=ERROR"); n != 1 {
		t.Errorf("%d ERROR lines, want 1:\n%s", n, stderr)
	}
	golden(t, "run-key-changed.txt", regexp.MustCompile(`(?m)^time=\S+ `).ReplaceAllString(checkNormalizer(addr, dir)(stderr), ""))
}

// TestCheckUnreachableBrokersDefault: with the default settings, brokers
// that do not answer are reported within seconds (--broker-wait, 5 s),
// naming the setting to wait longer, and no retry lines are printed
// around the report.
func TestCheckUnreachableBrokersDefault(t *testing.T) {
	start := time.Now()
	out, errOut, code := runCheck(t, "--json", "--brokers", "127.0.0.1:1", "--input", "a", "--output", "b", "--checkpoint-url", "mem://check-unreachable-default")
	if took := time.Since(start); code != exitRuntime || took > 8*time.Second {
		t.Fatalf("exit %d after %s, want 1 within about 5 s:\n%s", code, took, out)
	}
	var rep preflight.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	for _, c := range rep.Checks {
		if c.Name == "brokers" && (c.Status != preflight.Fail || !strings.Contains(c.Detail, "--broker-wait")) {
			t.Errorf("brokers: %s %q", c.Status, c.Detail)
		}
	}
	if strings.Contains(errOut, "level=WARN") {
		t.Errorf("retry lines printed around the report:\n%s", errOut)
	}
}

// TestCheckRepartitionPlans: with --repartition and no repartition topic
// yet (a first deploy), check plans with the partitions the hop will give
// it (--output's) instead of skipping the memory and checkpoint checks.
func TestCheckRepartitionPlans(t *testing.T) {
	addr := checkBroker(t)
	dir := t.TempDir()
	out, errOut, code := runCheck(t, "--json", "--brokers", addr, "--group", "g", "--input", "orders", "--output", "orders-unique",
		"--key", "json:order_id", "--repartition", "--checkpoint-url", "file://"+dir)
	if code != exitOK {
		t.Fatalf("exit %d, want 0:\n%s%s", code, out, errOut)
	}
	var rep preflight.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	seen := map[string]preflight.Check{}
	for _, c := range rep.Checks {
		seen[c.Name] = c
	}
	if c := seen["memory"]; c.Status != preflight.OK || !strings.Contains(c.Detail, "the 2 partitions the --repartition hop's topic gets") {
		t.Errorf("memory: %s %q", c.Status, c.Detail)
	}
	if c := seen["checkpoints"]; c.Status != preflight.OK || !strings.Contains(c.Detail, "each of the 2 partitions starts a new memory") {
		t.Errorf("checkpoints: %s %q", c.Status, c.Detail)
	}
}
