package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/bloomgate/bloomgate/internal/proctest"
)

var binary string

func TestMain(m *testing.M) {
	os.Exit(proctest.Main(m, &binary, proctest.BuildOptions{}))
}

func runInProcess(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestUsage(t *testing.T) {
	code, _, stderr := runInProcess()
	if code != exitUsage || !strings.Contains(stderr, "Commands:") {
		t.Fatalf("no arguments: exit %d, stderr %q", code, stderr)
	}
	code, stdout, _ := runInProcess("--help")
	if code != exitOK {
		t.Fatalf("--help: exit %d", code)
	}
	for _, c := range commands() {
		if !strings.Contains(stdout, "  "+c.name+" ") {
			t.Errorf("help does not list %s", c.name)
		}
	}
	if code, _, stderr := runInProcess("frobnicate"); code != exitUsage || !strings.Contains(stderr, `unknown command "frobnicate"`) {
		t.Fatalf("unknown command: exit %d, %q", code, stderr)
	}
	if code, stdout, _ := runInProcess("version"); code != exitOK || !strings.HasPrefix(stdout, "bloomgate ") {
		t.Fatalf("version: exit %d, %q", code, stdout)
	}
	for _, cmd := range []string{"run", "broker", "loadgen"} {
		code, stdout, _ := runInProcess(cmd, "--help")
		if code != exitOK || !strings.Contains(stdout, "Usage: bloomgate "+cmd) {
			t.Errorf("%s --help: exit %d, %q", cmd, code, stdout)
		}
	}
	if code, _, _ := runInProcess("broker", "--no-such-flag"); code != exitUsage {
		t.Errorf("broker with a bad flag: exit %d, want %d", code, exitUsage)
	}
	if code, _, stderr := runInProcess("loadgen", "--topic", "t", "--duplicates", "1.5"); code != exitUsage || !strings.Contains(stderr, "duplicates") {
		t.Errorf("loadgen with a bad ratio: exit %d, %q", code, stderr)
	}
}

func TestRunHelpListsSettings(t *testing.T) {
	code, stdout, _ := runInProcess("run", "--help")
	if code != exitOK {
		t.Fatalf("exit %d", code)
	}
	for _, s := range []string{"--brokers", "--key", "--normalize", "--window", "--capacity", "--fpr",
		"--checkpoint-url", "--on-missing-key", "--sasl-mechanism", "--tls-ca-file", "BLOOMGATE_CHECKPOINT_URL", "default 24h,"} {
		if !strings.Contains(stdout, s) {
			t.Errorf("run --help lacks %q", s)
		}
	}
}

// TestRunBadConfig runs the built binary: bad settings exit with 2 and an
// error that names the setting.
func TestRunBadConfig(t *testing.T) {
	tests := []struct {
		args []string
		env  []string
		want []string
	}{
		{[]string{"run"}, nil, []string{"--brokers", "--input", "--output"}},
		{[]string{"run", "--brokers", "127.0.0.1:9092", "--input", "a", "--output", "a"}, nil, []string{"--output", "also --input"}},
		{[]string{"run", "--brokers", "127.0.0.1:9092", "--input", "a", "--output", "b"}, []string{"BLOOMGATE_FPR=1.5"}, []string{"BLOOMGATE_FPR (--fpr): 1.5: must be strictly between 0 and 1"}},
		{[]string{"run", "--brokers", "127.0.0.1:9092", "--input", "a", "--output", "b", "--capacity", "0"}, nil, []string{"--capacity"}},
		{[]string{"run", "--no-such-setting"}, nil, []string{"no-such-setting"}},
	}
	for _, tt := range tests {
		cmd := exec.Command(binary, tt.args...)
		cmd.Env = append(os.Environ(), tt.env...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != exitUsage {
			t.Errorf("%v %v: %v, want exit code 2; stderr:\n%s", tt.env, tt.args, err, stderr.String())
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(stderr.String(), w) {
				t.Errorf("%v %v: stderr lacks %q:\n%s", tt.env, tt.args, w, stderr.String())
			}
		}
	}
}

// TestBadFlagOneLine runs the built binary: a bad flag value or an
// unknown flag is one line naming the flag with an accepted example or the
// closest flag, then the hint; no usage text, exit code 2.
func TestBadFlagOneLine(t *testing.T) {
	tests := []struct {
		args []string
		env  []string
		want string // the whole of stderr
	}{
		{[]string{"run", "--window", "7x"}, nil,
			`bloomgate run: --window: "7x": unknown unit "x"; use ns, us, ms, s, m, h, d or w, e.g. 90s, 15m, 36h, 7d or 1d12h` + "\n" +
				`Run "bloomgate run --help" for every setting.` + "\n"},
		{[]string{"run", "--windw", "7d"}, nil,
			`bloomgate run: unknown flag --windw; did you mean --window?` + "\n" +
				`Run "bloomgate run --help" for every setting.` + "\n"},
		{[]string{"run", "--brokers", "127.0.0.1:9092", "--input", "a", "--output", "b"}, []string{"BLOOMGATE_FPR=one percent"},
			`bloomgate run: BLOOMGATE_FPR (--fpr): "one percent" is not a rate: use a fraction or a percentage, e.g. 0.01 or 1%` + "\n" +
				`Run "bloomgate run --help" for every setting.` + "\n"},
		{[]string{"run", "--brokers", "127.0.0.1:9092", "--input", "a", "--output", "b", "--capacity", "1e12"}, nil,
			`bloomgate run: --capacity: 1T keys per window at --fpr 0.01 with 4 generations need 2.04 TiB of filter memory for the whole topic, ` +
				`more than the 1 TiB bound on any plan (docs/settings.md): use the expected distinct keys per window of the whole topic (e.g. 1G), or raise --fpr` + "\n" +
				`Run "bloomgate run --help" for every setting.` + "\n"},
		{[]string{"dev", "--evnts", "3"}, nil,
			`bloomgate dev: unknown flag --evnts; did you mean --events?` + "\n" +
				`Run "bloomgate dev --help" for every flag.` + "\n"},
		{[]string{"dev", "--drain-timeout", "2x"}, nil,
			`bloomgate dev: --drain-timeout: "2x": unknown unit "x"; use ns, us, ms, s, m, h, d or w, e.g. 90s, 15m, 36h, 7d or 1d12h` + "\n" +
				`Run "bloomgate dev --help" for every flag.` + "\n"},
		{[]string{"loadgen", "--count", "1.5"}, nil,
			`bloomgate loadgen: --count: "1.5" is not a whole count: use a whole number, e.g. 2, 1500 or 1.5k` + "\n" +
				`Run "bloomgate loadgen --help" for every flag.` + "\n"},
	}
	for _, tt := range tests {
		cmd := exec.Command(binary, tt.args...)
		cmd.Env = append(os.Environ(), tt.env...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		_ = cmd.Run()
		if code := cmd.ProcessState.ExitCode(); code != exitUsage {
			t.Errorf("%v %v: exit code %d, want %d", tt.env, tt.args, code, exitUsage)
		}
		if stderr.String() != tt.want || stdout.Len() != 0 {
			t.Errorf("%v %v: stderr\n%s\nwant\n%s(stdout %q)", tt.env, tt.args, stderr.String(), tt.want, stdout.String())
		}
	}
}

// TestYAMLProblemsListed: every problem of a config file is listed, one a
// line, before the hint: values that do not parse, unknown settings and
// values that parse but are invalid, each on its line, then the settings
// missing.
func TestYAMLProblemsListed(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(file, []byte("brokers: [127.0.0.1:9092]\nwindw: 7d\ncapacity: 10 millions\nfpr: 2\ninput: orders\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runInProcess("run", "--config", file)
	want := "bloomgate run: 4 problems:\n" +
		"  " + file + `:2: unknown setting "windw"; did you mean window?` + "\n" +
		"  " + file + `:3: capacity: "10 millions": unknown suffix "millions"; use k, m, g or b, t (thousand, million, billion, trillion), e.g. 10000000, 10_000_000, 10M, 2.5k or 1e7` + "\n" +
		"  " + file + `:4: fpr: 2: must be strictly between 0 and 1, i.e. 0% and 100% (e.g. 0.01 or 1%)` + "\n" +
		"  --output (not set): no output topic: set --output NAME\n" +
		`Run "bloomgate run --help" for every setting.` + "\n"
	if code != exitUsage || stderr != want {
		t.Fatalf("exit %d, stderr\n%s\nwant\n%s", code, stderr, want)
	}
}

// startBroker runs `bloomgate broker` and returns its address.
func startBroker(t *testing.T, args ...string) (addr string, p *proctest.Proc) {
	t.Helper()
	p, addr = proctest.StartBroker(t, binary, 20*time.Second, args...)
	return addr, p
}

func TestBrokerAndLoadgenBinaries(t *testing.T) {
	addr, brokerProc := startBroker(t, "--topic", "orders:4", "--topic", "urls:2")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lg := exec.CommandContext(ctx, binary, "loadgen", "--brokers", addr, "--topic", "orders",
		"--count", "3000", "--duplicates", "0.25", "--seed", "5")
	var out, errb bytes.Buffer
	lg.Stdout, lg.Stderr = &out, &errb
	if err := lg.Run(); err != nil {
		t.Fatalf("loadgen: %v\n%s", err, errb.String())
	}
	if !strings.Contains(out.String(), "events=3000 unique=2250 duplicates=750 ") {
		t.Fatalf("loadgen summary %q", out.String())
	}
	if !strings.Contains(errb.String(), "loadgen: 3000/3000 events") {
		t.Fatalf("loadgen progress %q", errb.String())
	}

	// kafka-go sees every event in the broker started by the binary.
	conn, err := kafka.DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	parts, err := conn.ReadPartitions("orders")
	conn.Close()
	if err != nil || len(parts) != 4 {
		t.Fatalf("orders partitions: %d, %v", len(parts), err)
	}
	var total int64
	for _, p := range parts {
		lc, err := kafka.DialLeader(ctx, "tcp", addr, "orders", p.ID)
		if err != nil {
			t.Fatal(err)
		}
		last, err := lc.ReadLastOffset()
		lc.Close()
		if err != nil {
			t.Fatal(err)
		}
		total += last
	}
	if total != 3000 {
		t.Fatalf("broker holds %d order events, want 3000", total)
	}

	// SIGTERM stops the broker with exit code 0.
	if err := brokerProc.Stop(15 * time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestLoadgenUnreachableBroker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "loadgen", "--brokers", "127.0.0.1:1", "--topic", "t", "--count", "10", "--quiet")
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	err := cmd.Run()
	if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != exitRuntime {
		t.Fatalf("loadgen against a closed port: %v, want exit code 1", err)
	}
}

// TestBrokerDataDirSurvivesKill: records acknowledged before a SIGKILL of
// `bloomgate broker --data-dir` are there after a restart.
func TestBrokerDataDirSurvivesKill(t *testing.T) {
	dir := t.TempDir()
	addr, broker := startBroker(t, "--topic", "orders:2", "--data-dir", dir)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lg := exec.CommandContext(ctx, binary, "loadgen", "--brokers", addr, "--topic", "orders", "--count", "5000", "--quiet")
	if out, err := lg.CombinedOutput(); err != nil {
		t.Fatalf("loadgen: %v\n%s", err, out)
	}
	if err := broker.KillWait(10 * time.Second); err != nil {
		t.Fatal(err)
	}

	addr, _ = startBroker(t, "--topic", "orders:2", "--data-dir", dir)
	var total int64
	for p := range 2 {
		lc, err := kafka.DialLeader(ctx, "tcp", addr, "orders", p)
		if err != nil {
			t.Fatal(err)
		}
		last, err := lc.ReadLastOffset()
		lc.Close()
		if err != nil {
			t.Fatal(err)
		}
		total += last
	}
	if total != 5000 {
		t.Fatalf("after kill -9 and restart the broker holds %d records, want 5000", total)
	}
}

func TestLoadgenWithSASL(t *testing.T) {
	addr, _ := startBroker(t, "--topic", "t:1", "--user", "SCRAM-SHA-256:alice:pw")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "loadgen", "--brokers", addr, "--topic", "t", "--count", "100", "--quiet",
		"--sasl-mechanism", "scram-sha-256", "--sasl-username", "alice")
	cmd.Env = append(os.Environ(), "BLOOMGATE_SASL_PASSWORD=pw")
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "events=100 ") {
		t.Fatalf("loadgen with SASL: %v\n%s", err, out)
	}
	// A wrong password: one login, exit code 2 at once, the settings named.
	bad := exec.CommandContext(ctx, binary, "loadgen", "--brokers", addr, "--topic", "t", "--count", "1", "--quiet",
		"--sasl-mechanism", "scram-sha-256", "--sasl-username", "alice", "--sasl-password", "wrong")
	var stderr bytes.Buffer
	bad.Stderr = &stderr
	start := time.Now()
	_ = bad.Run()
	took := time.Since(start)
	if code := bad.ProcessState.ExitCode(); code != exitUsage {
		t.Fatalf("loadgen with a wrong password: exit %d, want %d; stderr:\n%s", code, exitUsage, stderr.String())
	}
	for _, want := range []string{`--sasl-username "alice" with --sasl-mechanism scram-sha-256: the brokers refused the login`,
		"BLOOMGATE_SASL_PASSWORD (or --sasl-password)", "gave up after 1 attempt"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("loadgen with a wrong password: stderr lacks %q:\n%s", want, stderr.String())
		}
	}
	if took > 10*time.Second {
		t.Errorf("loadgen with a wrong password took %s, want an answer at once", took)
	}
}

// TestRunWrongPassword: `bloomgate run` with a wrong SASL password stops
// at the first login with exit code 2 and an error naming the settings,
// instead of retrying for the start-up bound.
func TestRunWrongPassword(t *testing.T) {
	addr, _ := startBroker(t, "--topic", "in:2", "--topic", "out:2", "--user", "SCRAM-SHA-512:bloomgate:right")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "run", "--brokers", addr, "--input", "in", "--output", "out",
		"--sasl-mechanism", "scram-sha-512", "--sasl-username", "bloomgate",
		"--checkpoint-url", "file://"+t.TempDir(), "--metrics-addr", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "BLOOMGATE_SASL_PASSWORD=wrong")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	_ = cmd.Run()
	took := time.Since(start)
	if code := cmd.ProcessState.ExitCode(); code != exitUsage {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitUsage, stderr.String())
	}
	for _, want := range []string{`--sasl-username \"bloomgate\" with --sasl-mechanism scram-sha-512: the brokers refused the login`,
		"invalid credentials with SASL mechanism SCRAM-SHA-512 (error 58", "BLOOMGATE_SASL_PASSWORD (or --sasl-password)", "gave up after 1 attempt"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
	if took > 10*time.Second {
		t.Errorf("took %s, want an answer at once", took)
	}
	t.Logf("exit %d after %s", cmd.ProcessState.ExitCode(), took.Round(time.Millisecond))
}

// TestBrokerOffsetsSurviveKill: offsets a consumer group committed before a
// SIGKILL of the broker are there after a restart.
func TestBrokerOffsetsSurviveKill(t *testing.T) {
	dir := t.TempDir()
	addr, broker := startBroker(t, "--topic", "t:1", "--data-dir", dir)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lg := exec.CommandContext(ctx, binary, "loadgen", "--brokers", addr, "--topic", "t", "--count", "100", "--quiet")
	if out, err := lg.CombinedOutput(); err != nil {
		t.Fatalf("loadgen: %v\n%s", err, out)
	}
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{addr}, Topic: "t", GroupID: "g",
		SessionTimeout: time.Second, HeartbeatInterval: 100 * time.Millisecond, RebalanceTimeout: time.Second, StartOffset: kafka.FirstOffset})
	var last kafka.Message
	for i := 0; i < 60; i++ {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		last = m
	}
	if err := r.CommitMessages(ctx, last); err != nil {
		t.Fatal(err)
	}
	r.Close()
	if err := broker.KillWait(10 * time.Second); err != nil {
		t.Fatal(err)
	}

	addr, _ = startBroker(t, "--topic", "t:1", "--data-dir", dir)
	r = kafka.NewReader(kafka.ReaderConfig{Brokers: []string{addr}, Topic: "t", GroupID: "g",
		SessionTimeout: time.Second, HeartbeatInterval: 100 * time.Millisecond, RebalanceTimeout: time.Second, StartOffset: kafka.FirstOffset})
	defer r.Close()
	m, err := r.FetchMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m.Offset != 60 {
		t.Fatalf("group resumed at offset %d after kill -9 of the broker, want 60", m.Offset)
	}
}

// TestBrokerHelpNamesClients: `broker --help` says which clients can use
// it, with SASL, and shows the kcat flags that TestSASLKcat
// (internal/broker) runs.
func TestBrokerHelpNamesClients(t *testing.T) {
	code, out, _ := runInProcess("broker", "--help")
	for _, want := range []string{"kcat and other librdkafka clients", "SASL PLAIN and SCRAM (--user)",
		"-X security.protocol=SASL_PLAINTEXT -X sasl.mechanisms=SCRAM-SHA-512"} {
		if code != exitOK || !strings.Contains(out, want) {
			t.Errorf("broker --help (exit %d) lacks %q:\n%s", code, want, out)
		}
	}
}
