package config

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go/sasl"
)

var minimal = []string{"--brokers", "127.0.0.1:9092", "--input", "in", "--output", "out"}

func TestDefaultsAreValid(t *testing.T) {
	cfg, err := Load(minimal, &bytes.Buffer{})
	if err != nil {
		t.Fatalf("minimal config: %v", err)
	}
	if cfg.Group != "bloomgate" || cfg.Key != "key" || cfg.Window != 24*time.Hour || cfg.FPR != 0.01 ||
		cfg.Generations != 4 || cfg.Capacity != 10_000_000 || cfg.Partitioning != "same" {
		t.Fatalf("unexpected defaults: %+v", cfg)
	}
	if cfg.OnMissingKey != OnMissingForward || cfg.OnUnwritable != OnUnwritableStall {
		t.Fatalf("without dead-letter: on-missing-key %q, on-unwritable %q; want forward, stall", cfg.OnMissingKey, cfg.OnUnwritable)
	}
	if !strings.HasPrefix(cfg.CheckpointURL, "file:///") || !strings.HasSuffix(cfg.CheckpointURL, "/.bloomgate/checkpoints") {
		t.Fatalf("checkpoint URL not made absolute: %q", cfg.CheckpointURL)
	}
	cfg, err = Load(append(minimal, "--dead-letter", "dlq"), &bytes.Buffer{})
	if err != nil || cfg.OnMissingKey != OnMissingDeadLetter || cfg.OnUnwritable != OnUnwritableDeadLetter {
		t.Fatalf("with dead-letter: on-missing-key %q, on-unwritable %q, %v", cfg.OnMissingKey, cfg.OnUnwritable, err)
	}
}

func TestPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "bloomgate.yaml")
	yaml := `
brokers: [a:1, b:2]
input: file-in
output: file-out
group: file-group
window: 1h
capacity: 5M
fpr: 0.02
tls:
  insecure-skip-verify: false
sasl:
  mechanism: plain
  username: file-user
  password: file-pw
`
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("BLOOMGATE_CONFIG", file)
	t.Setenv("BLOOMGATE_GROUP", "env-group")
	t.Setenv("BLOOMGATE_WINDOW", "2h")
	t.Setenv("BLOOMGATE_SASL_PASSWORD", "env-pw")
	t.Setenv("BLOOMGATE_BROKERS", "env:1,env:2")
	cfg, err := Load([]string{"--window", "3h", "--brokers", "flag:1"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct{ name, got, want string }{
		{"input (file only)", cfg.Input, "file-in"},
		{"group (file < env)", cfg.Group, "env-group"},
		{"window (file < env < flag)", FormatDuration(cfg.Window), "3h"},
		{"sasl password (file < env)", cfg.SASL.Password, "env-pw"},
		{"sasl username (nested yaml)", cfg.SASL.Username, "file-user"},
		{"brokers (flag replaces env and file)", strings.Join(cfg.Brokers, ","), "flag:1"},
		{"config file", cfg.ConfigFile, file},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.name, c.got, c.want)
		}
	}
	if cfg.Capacity != 5_000_000 || cfg.FPR != 0.02 {
		t.Errorf("capacity %d fpr %v from file", cfg.Capacity, cfg.FPR)
	}

	t.Setenv("BLOOMGATE_BROKERS", "")
	cfg, err = Load(nil, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(cfg.Brokers, ",") != "a:1,b:2" {
		t.Errorf("brokers from file list = %v", cfg.Brokers)
	}
}

func TestYAMLValuesTakenAsWritten(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.yaml")
	yaml := "brokers: [a:1]\ninput: y\noutput: no\ngroup: on\ncapacity: 1e7\nduplicates: ~\ndead-letter:\nfpr: .5\ntls:\n  enabled: off\n"
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load([]string{"--config", file}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Input != "y" || cfg.Output != "no" || cfg.Group != "on" || cfg.Capacity != 1e7 || cfg.FPR != 0.5 ||
		cfg.Duplicates != "" || cfg.DeadLetter != "" || cfg.TLS.Enabled {
		t.Fatalf("values not taken as written: %+v", cfg)
	}
	for _, bad := range []string{"input: [a, [b]]\n", "- a\n- b\n", "input: x\n  bad indent: [\n"} {
		if err := os.WriteFile(file, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(append([]string{"--config", file}, minimal...), &bytes.Buffer{}); err == nil {
			t.Errorf("config file %q accepted", bad)
		}
	}
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(append([]string{"--config", file}, minimal...), &bytes.Buffer{}); err != nil {
		t.Errorf("empty config file: %v", err)
	}
}

func TestUnknownFileKey(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(file, []byte("windw: 1h\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(append([]string{"--config", file}, minimal...), &bytes.Buffer{})
	if want := file + `:1: unknown setting "windw"; did you mean window?`; err == nil || err.Error() != want {
		t.Fatalf("typo in config file: %v, want %s", err, want)
	}
}

func TestValidationErrors(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		args    []string
		setting string
		hint    string
	}{
		{"no brokers", []string{"--input", "in", "--output", "out"}, "brokers", "set --brokers"},
		{"bad broker", []string{"--brokers", "nohostport"}, "brokers", "host:port"},
		{"no input", []string{"--input", ""}, "input", "set --input"},
		{"no output", []string{"--output", ""}, "output", "set --output"},
		{"input equals output", []string{"--output", "in"}, "output", "also --input"},
		{"duplicates equals output", []string{"--duplicates", "out"}, "duplicates", "also --output"},
		{"dead-letter equals input", []string{"--dead-letter", "in"}, "dead-letter", "also --input"},
		{"bad topic name", []string{"--output", "a b"}, "output", "not allowed"},
		{"fpr zero", []string{"--fpr", "0"}, "fpr", "between 0 and 1"},
		{"fpr one", []string{"--fpr", "1"}, "fpr", "between 0 and 1"},
		{"fpr negative", []string{"--fpr", "-0.1"}, "fpr", "between 0 and 1"},
		{"capacity zero", []string{"--capacity", "0"}, "capacity", "expected distinct keys"},
		{"window zero", []string{"--window", "0s"}, "window", "must be positive"},
		{"window negative", []string{"--window", "-1h"}, "window", "must be positive"},
		{"generations one", []string{"--generations", "1"}, "generations", "between 2 and 64"},
		{"tiny span", []string{"--window", "2s", "--generations", "4"}, "window", "shorter than 1s"},
		{"bad key spec", []string{"--key", "value"}, "key", "json:PATH"},
		{"bad normalize", []string{"--normalize", "upper"}, "normalize", "none, trim, lower, url"},
		{"url rules without url", []string{"--url-rules", "crawler"}, "url-rules", "set --normalize url"},
		{"url strip params without url", []string{"--normalize", "lower", "--url-strip-params", "ref"}, "url-rules", "set --normalize url"},
		{"bad url rule", []string{"--normalize", "url", "--url-rules", "strip-www,strip-all"}, "url-rules", "strip-tracking"},
		{"bad url strip param", []string{"--normalize", "url", "--url-strip-params", "a=b"}, "url-strip-params", "'*' matching"},
		{"bad on-missing-key", []string{"--on-missing-key", "ignore"}, "on-missing-key", "not one of"},
		{"dead-letter policy without topic", []string{"--on-missing-key", "dead-letter"}, "on-missing-key", "set --dead-letter"},
		{"bad on-unwritable", []string{"--on-unwritable", "fail"}, "on-unwritable", "not one of"},
		{"unwritable to a dead-letter topic that is not set", []string{"--on-unwritable", "dead-letter"}, "on-unwritable", "set --dead-letter"},
		{"bad partitioning", []string{"--partitioning", "random"}, "partitioning", "same, hash"},
		{"bad json validation", []string{"--json-validation", "none"}, "json-validation", "strict, lazy"},
		{"max key bytes", []string{"--max-key-bytes", "0"}, "max-key-bytes", "between 1"},
		{"checkpoint url scheme", []string{"--checkpoint-url", "gs://b"}, "checkpoint-url", "s3, file or mem"},
		{"checkpoint url no bucket", []string{"--checkpoint-url", "s3:///x"}, "checkpoint-url", "no bucket"},
		{"checkpoint interval", []string{"--checkpoint-interval", "0s"}, "checkpoint-interval", "positive"},
		{"checkpoint retain", []string{"--checkpoint-retain", "0"}, "checkpoint-retain", "at least 1"},
		{"staleness below interval", []string{"--max-checkpoint-staleness", "10s"}, "max-checkpoint-staleness", "shorter than --checkpoint-interval"},
		{"on restore failure", []string{"--on-restore-failure", "ignore"}, "on-restore-failure", "fail, empty"},
		{"exact without directory", []string{"--exact", "--exact-dir", ""}, "exact-dir", "needs a local directory"},
		{"metrics addr", []string{"--metrics-addr", "9464"}, "metrics-addr", "host:port"},
		{"shutdown timeout", []string{"--shutdown-timeout", "0s"}, "shutdown-timeout", "positive"},
		{"log format", []string{"--log-format", "xml"}, "log-format", "text, json"},
		{"log level", []string{"--log-level", "loud"}, "log-level", "debug, info"},
		{"batch size", []string{"--batch-size", "0"}, "batch-size", "at least 1"},
		{"batch timeout", []string{"--batch-timeout", "0s"}, "batch-timeout", "positive"},
		{"tls file without tls", []string{"--tls-ca-file", notPEM}, "tls-ca-file", "add --tls-enabled"},
		{"tls file unreadable", []string{"--tls-enabled", "--tls-ca-file", filepath.Join(dir, "missing.pem")}, "tls-ca-file", "cannot read"},
		{"tls ca not pem", []string{"--tls-enabled", "--tls-ca-file", notPEM}, "tls-enabled", "no PEM certificate"},
		{"tls cert without key", []string{"--tls-enabled", "--tls-cert-file", notPEM}, "tls-cert-file", "both"},
		{"sasl unknown", []string{"--sasl-mechanism", "gssapi"}, "sasl-mechanism", "not one of"},
		{"sasl no user", []string{"--sasl-mechanism", "scram-sha-512", "--sasl-password", "x"}, "sasl-username", "needs a user name"},
		{"sasl no password", []string{"--sasl-mechanism", "plain", "--sasl-username", "u"}, "sasl-password", "BLOOMGATE_SASL_PASSWORD"},
		{"sasl creds without mechanism", []string{"--sasl-username", "u"}, "sasl-mechanism", "no mechanism"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := tt.args
			if tt.setting != "brokers" || tt.name == "bad broker" {
				args = append(append([]string{}, minimal...), tt.args...)
			}
			_, err := Load(args, &bytes.Buffer{})
			if err == nil {
				t.Fatalf("Load(%v) accepted", args)
			}
			var se *SettingError
			if !errors.As(err, &se) {
				t.Fatalf("error %v is not a SettingError", err)
			}
			msg := err.Error()
			if !namesSetting(msg, tt.setting) || !strings.Contains(msg, tt.hint) {
				t.Fatalf("error %q does not name --%s with hint %q", msg, tt.setting, tt.hint)
			}
		})
	}
}

func TestAllErrorsReported(t *testing.T) {
	_, err := Load([]string{"--fpr", "2", "--window", "0s"}, &bytes.Buffer{})
	for _, s := range []string{"--brokers", "--input", "--output", "--fpr", "--window"} {
		if err == nil || !namesSetting(err.Error(), strings.TrimPrefix(s, "--")) {
			t.Errorf("error %v does not mention %s", err, s)
		}
	}
}

func TestHelpListsEveryFlag(t *testing.T) {
	var out bytes.Buffer
	_, err := Load([]string{"--help"}, &out)
	if !errors.Is(err, ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	help := out.String()
	cfg := Default()
	fs := cfg.FlagSet("run")
	n := 0
	for _, s := range settings {
		if slices.Contains(sectionOrder, s.section) {
			n++
		}
	}
	count := 0
	fs.VisitAll(func(f *flag.Flag) {
		count++
		if !strings.Contains(help, "--"+f.Name+" ") && !strings.Contains(help, "--"+f.Name+"\t") && !strings.Contains(help, "--"+f.Name+"\n") {
			t.Errorf("help does not list --%s", f.Name)
		}
		if !strings.Contains(help, LookupEnvName(f.Name)) {
			t.Errorf("help does not list env %s", LookupEnvName(f.Name))
		}
	})
	if count != n {
		t.Errorf("%d flags, %d in help sections: give every setting a section of sectionOrder, once", count, n)
	}
	for _, want := range []string{"default 24h,", "default bloomgate", "default 0.01", "default 10M,", "default 1MiB,", "BLOOMGATE_CHECKPOINT_URL",
		"--window duration", "--capacity count", "--fpr rate", "--max-batch-bytes size"} {
		if !strings.Contains(help, want) {
			t.Errorf("help lacks %q", want)
		}
	}
}

func TestPasswordNotLogged(t *testing.T) {
	cfg, err := Load(append(minimal, "--sasl-mechanism", "plain", "--sasl-username", "u", "--sasl-password", "s3cret"), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	logger, err := cfg.NewLogger(&buf)
	if err != nil {
		t.Fatal(err)
	}
	logger.Info("config", "cfg", cfg)
	if strings.Contains(buf.String(), "s3cret") || !strings.Contains(buf.String(), "redacted") {
		t.Fatalf("log line leaks or lacks the password marker: %s", buf.String())
	}
	m, err := cfg.SASLMechanism()
	if err != nil || m == nil || m.Name() != "PLAIN" {
		t.Fatalf("SASL mechanism %v, %v", m, err)
	}
}

func TestAbsFileURL(t *testing.T) {
	wd, _ := os.Getwd()
	for in, want := range map[string]string{
		"file://./cp":       "file://" + filepath.Join(wd, "cp"),
		"file:cp":           "file://" + filepath.Join(wd, "cp"),
		"file:///var/lib/x": "file:///var/lib/x",
		"s3://b/p":          "s3://b/p",
	} {
		if got := AbsFileURL(in); got != want {
			t.Errorf("AbsFileURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestExactSettings: --exact is off by default, its directory defaults
// beside the checkpoints and is made absolute, and both come from the
// environment and the file like every setting.
func TestExactSettings(t *testing.T) {
	cfg, err := Load(minimal, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	wd, _ := os.Getwd()
	if cfg.Exact || cfg.ExactDir != filepath.Join(wd, ".bloomgate", "exact") {
		t.Errorf("defaults: exact %v in %q", cfg.Exact, cfg.ExactDir)
	}
	t.Setenv("BLOOMGATE_EXACT", "true")
	t.Setenv("BLOOMGATE_EXACT_DIR", "/var/lib/bloomgate/exact")
	if cfg, err = Load(minimal, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if !cfg.Exact || cfg.ExactDir != "/var/lib/bloomgate/exact" {
		t.Errorf("from the environment: exact %v in %q", cfg.Exact, cfg.ExactDir)
	}
	file := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(file, []byte("exact: false\nexact-dir: rel/x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("BLOOMGATE_EXACT", "")
	t.Setenv("BLOOMGATE_EXACT_DIR", "")
	os.Unsetenv("BLOOMGATE_EXACT")
	os.Unsetenv("BLOOMGATE_EXACT_DIR")
	if cfg, err = Load(append([]string{"--config", file, "--exact"}, minimal...), &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if !cfg.Exact || cfg.ExactDir != filepath.Join(wd, "rel", "x") {
		t.Errorf("file and flag: exact %v in %q", cfg.Exact, cfg.ExactDir)
	}
}

// TestExampleFile: the example file names every setting and, apart from the
// example values, holds the defaults.
func TestExampleFile(t *testing.T) {
	file := filepath.Join("testdata", "bloomgate.example.yaml")
	cfg, err := Load([]string{"--config", file}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	if err := want.Validate(); err == nil {
		t.Fatal("defaults without brokers validated")
	}
	want.Brokers, want.Input, want.Output, want.Key = []string{"127.0.0.1:9092"}, "orders", "orders-deduped", "json:order_id"
	want.ConfigFile = file
	want.OnMissingKey = OnMissingForward
	want.OnUnwritable = OnUnwritableStall
	want.CheckpointURL = AbsFileURL(want.CheckpointURL)
	want.ExactDir, _ = filepath.Abs(want.ExactDir)
	cfg.origins = nil // where each value was set: TestValidationNamesWhereSet
	if fmt.Sprintf("%+v", *cfg) != fmt.Sprintf("%+v", want) {
		t.Fatalf("example file:\n got %+v\nwant %+v", *cfg, want)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	def := Default()
	def.FlagSet("run").VisitAll(func(f *flag.Flag) {
		name := f.Name
		for _, p := range []string{"tls-", "sasl-"} {
			if rest, ok := strings.CutPrefix(name, p); ok {
				name = rest
			}
		}
		if f.Name != "config" && !strings.Contains(string(data), name+":") {
			t.Errorf("example file lacks %s", f.Name)
		}
	})
}

// FuzzConfigFile: any file content loads or fails with an error, never a panic.
func FuzzConfigFile(f *testing.F) {
	f.Add([]byte("brokers: [a:1]\ninput: x\noutput: y\n"))
	f.Add([]byte("tls:\n  enabled: on\nsasl: {mechanism: plain}\n"))
	f.Add([]byte("a: &x 1\nb: *x\n"))
	f.Add([]byte("capacity: 1e400\nfpr: NaN\nwindow: -1h\n"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		file := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(file, data, 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := Load([]string{"--config", file}, io.Discard)
		if err == nil && cfg == nil {
			t.Fatal("nil config without error")
		}
	})
}

func TestCheckpointURLWithCredentialsRejectedWithoutEcho(t *testing.T) {
	cfg := Default()
	cfg.Brokers = []string{"127.0.0.1:9092"}
	cfg.Input, cfg.Output = "in", "out"
	for _, u := range []string{
		"s3://AKIAEXAMPLE:s3cr3t-value@bucket/prefix",
		"s3://bucket/prefix?endpoint=http://AKIAEXAMPLE:s3cr3t-value@127.0.0.1:9000",
	} {
		cfg.CheckpointURL = u
		err := cfg.Validate()
		if err == nil {
			t.Fatalf("a checkpoint URL with credentials was accepted: %s", u)
		}
		if msg := err.Error(); strings.Contains(msg, "s3cr3t-value") || strings.Contains(msg, "AKIAEXAMPLE") {
			t.Fatalf("error echoes the credentials: %s", msg)
		}
		if !strings.Contains(err.Error(), "checkpoint-url") {
			t.Fatalf("error does not name the setting: %s", err)
		}
	}
}

func load(t *testing.T, args ...string) (*Run, error) {
	t.Helper()
	return Load(append(append([]string{}, minimal...), args...), &bytes.Buffer{})
}

func TestIsolationLevel(t *testing.T) {
	if cfg, err := load(t); err != nil || cfg.IsolationLevel != ReadCommitted {
		t.Fatalf("default: %v, %v", cfg, err)
	}
	if cfg, err := load(t, "--isolation-level", "read_uncommitted"); err != nil || cfg.IsolationLevel != ReadUncommitted {
		t.Fatalf("flag: %v, %v", cfg, err)
	}
	t.Run("env", func(t *testing.T) {
		t.Setenv("BLOOMGATE_ISOLATION_LEVEL", "read_uncommitted")
		if cfg, err := load(t); err != nil || cfg.IsolationLevel != ReadUncommitted {
			t.Fatalf("env: %v, %v", cfg, err)
		}
		if cfg, err := load(t, "--isolation-level", "read_committed"); err != nil || cfg.IsolationLevel != ReadCommitted {
			t.Fatalf("flag over env: %v, %v", cfg, err)
		}
	})
	file := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(file, []byte("isolation-level: read_uncommitted\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if cfg, err := load(t, "--config", file); err != nil || cfg.IsolationLevel != ReadUncommitted {
		t.Fatalf("file: %v, %v", cfg, err)
	}
	_, err := load(t, "--isolation-level", "serializable")
	want := `--isolation-level: "serializable" is not one of read_committed, read_uncommitted`
	if err == nil || err.Error() != want {
		t.Fatalf("bad value: %v\nwant %s", err, want)
	}
}

// TestWorkerSettings: the settings the worker has defaults for start at
// those defaults and are read from every source.
func TestWorkerSettings(t *testing.T) {
	cfg, err := load(t)
	if err != nil {
		t.Fatal(err)
	}
	// The worker's defaults (worker.Default*; TestDefaultsAgree compares them all).
	if cfg.CommitInterval != time.Second || cfg.MaxBatchBytes != 1<<20 || cfg.WriteTimeout != 10*time.Second || cfg.MaxReplay != 0 {
		t.Fatalf("defaults: commit-interval %v, max-batch-bytes %d, write-timeout %v, max-replay %d",
			cfg.CommitInterval, cfg.MaxBatchBytes, cfg.WriteTimeout, cfg.MaxReplay)
	}
	t.Setenv("BLOOMGATE_MAX_BATCH_BYTES", "4MiB")
	file := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(file, []byte("write-timeout: 30s\nmax-replay: 10M\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err = load(t, "--commit-interval", "500ms", "--config", file)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.CommitInterval != 500*time.Millisecond || cfg.MaxBatchBytes != 4<<20 || cfg.WriteTimeout != 30*time.Second || cfg.MaxReplay != 10_000_000 {
		t.Fatalf("commit-interval %v, max-batch-bytes %d, write-timeout %v, max-replay %d",
			cfg.CommitInterval, cfg.MaxBatchBytes, cfg.WriteTimeout, cfg.MaxReplay)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-batch-bytes", "100"}, `--max-batch-bytes: 100: must be between 1KiB and 2GiB-1 (Kafka's largest batch), at most the output topics' max.message.bytes (e.g. 1MiB)`},
		{[]string{"--max-batch-bytes", "2GiB"}, `--max-batch-bytes: 2GiB: must be between 1KiB and 2GiB-1 (Kafka's largest batch), at most the output topics' max.message.bytes (e.g. 1MiB)`},
		{[]string{"--commit-interval", "0s"}, `--commit-interval: 0s: must be positive (e.g. 1s)`},
		{[]string{"--write-timeout", "-1s"}, `--write-timeout: -1s: must be positive (e.g. 10s)`},
		{[]string{"--max-replay", "-5"}, `--max-replay: "-5" is negative: a count is 0 or more, e.g. 10000000, 10_000_000, 10M, 2.5k or 1e7`},
	} {
		_, err := load(t, tc.args...)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%v:\n got %v\nwant %s", tc.args, err, tc.want)
		}
	}
}

// TestLogValue: the start-up log names every setting as its flag and YAML
// key, with values as a flag takes them, and no secret.
func TestLogValue(t *testing.T) {
	cfg, err := load(t, "--sasl-mechanism", "plain", "--sasl-username", "u", "--sasl-password", "s3cret", "--dead-letter", "dlq")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("starting", "config", cfg)
	var line struct {
		Config map[string]any `json:"config"`
	}
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("%v: %s", err, buf.String())
	}
	cfg.FlagSet("names").VisitAll(func(f *flag.Flag) {
		if _, ok := line.Config[f.Name]; !ok {
			t.Errorf("setting %s not logged", f.Name)
		}
	})
	for k, want := range map[string]any{
		"window": "24h", "checkpoint-url": cfg.CheckpointURL, "dead-letter": "dlq", "on-missing-key": "dead-letter", "on-unwritable": "dead-letter",
		"capacity": "10M", "max-batch-bytes": "1MiB", "commit-interval": "1s", "sasl-password": "[redacted]",
		"tls-enabled": false, "brokers": "127.0.0.1:9092", "fpr": "0.01",
	} {
		if got := line.Config[k]; got != want {
			t.Errorf("%s logged as %v, want %v", k, got, want)
		}
	}
	if strings.Contains(buf.String(), "s3cret") || strings.Contains(buf.String(), "_") && strings.Contains(buf.String(), "checkpoint_url") {
		t.Fatalf("log line leaks the password or uses another spelling: %s", buf.String())
	}
}

// TestOnUnwritableEverySource: --on-unwritable is read from a flag, the
// environment and the file, and reaches the worker.
func TestOnUnwritableEverySource(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  string
		file string
		args []string
		want string
	}{
		{"flag", "", "", []string{"--on-unwritable", "drop"}, OnUnwritableDrop},
		{"environment", "drop", "", nil, OnUnwritableDrop},
		{"file", "", "on-unwritable: drop\n", nil, OnUnwritableDrop},
		{"flag over environment", "stall", "", []string{"--dead-letter", "dlq", "--on-unwritable", "dead-letter"}, OnUnwritableDeadLetter},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv("BLOOMGATE_ON_UNWRITABLE", tc.env)
			}
			args := tc.args
			if tc.file != "" {
				file := filepath.Join(t.TempDir(), "c.yaml")
				if err := os.WriteFile(file, []byte(tc.file), 0o600); err != nil {
					t.Fatal(err)
				}
				args = append(args, "--config", file)
			}
			cfg, err := Load(append(append([]string{}, minimal...), args...), &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			wc, err := cfg.WorkerConfig()
			if err != nil {
				t.Fatal(err)
			}
			if cfg.OnUnwritable != tc.want || string(wc.OnUnwritable) != tc.want {
				t.Errorf("on-unwritable %q, mapped %q; want %q", cfg.OnUnwritable, wc.OnUnwritable, tc.want)
			}
		})
	}
}

// TestCheckpointURLRedacted: the start-up log and the settings errors show
// a checkpoint URL without the values of parameters other than region and
// endpoint, but with their names; an unknown parameter is a settings error.
func TestCheckpointURLRedacted(t *testing.T) {
	const secret = "wJalrXUtnFEMI-K7MDENG"
	cfg, err := load(t)
	if err != nil {
		t.Fatal(err)
	}
	// Validation refuses this URL (below); the log line redacts whatever
	// it is given.
	cfg.CheckpointURL = "s3://bucket/p?region=eu-west-1&aws_secret_access_key=" + secret
	var buf bytes.Buffer
	slog.New(slog.NewTextHandler(&buf, nil)).Info("starting", "config", cfg)
	if strings.Contains(buf.String(), secret) || !strings.Contains(buf.String(), `config.checkpoint-url="s3://bucket/p?region=eu-west-1&aws_secret_access_key=REDACTED"`) {
		t.Errorf("start-up log line:\n%s", buf.String())
	}
	for _, raw := range []string{"gs://bucket/p?token=" + secret, "s3:///p?token=" + secret, "s3://AKIA:" + secret + "/p",
		"s3://bucket/p?region=eu-west-1&aws_secret_access_key=" + secret} {
		_, err := load(t, "--checkpoint-url", raw)
		if err == nil {
			t.Fatalf("--checkpoint-url %s accepted", raw)
		}
		if strings.Contains(err.Error(), secret) || !strings.Contains(err.Error(), "checkpoint-url") ||
			strings.Contains(raw, "aws_secret_access_key") && !strings.Contains(err.Error(), `unknown parameter "aws_secret_access_key"`) {
			t.Errorf("--checkpoint-url %s: error %v", raw, err)
		}
	}
}

// namesSetting: msg names the flag of setting (--name followed by ":" or
// " ", as a flag's or a variable's message does).
func namesSetting(msg, setting string) bool {
	return strings.Contains(msg, "--"+setting+":") || strings.Contains(msg, "--"+setting+" ") || strings.Contains(msg, "--"+setting+")")
}

// TestValidationSASLOAuth: the oauthbearer and aws-msk-iam settings are
// checked for a complete source of credentials, and the client secret is
// refused on the command line.
func TestValidationSASLOAuth(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		args    []string
		setting string
		hint    string
	}{
		{"no source", []string{"--sasl-mechanism", "oauthbearer"}, "sasl-oauth-token-endpoint", "--sasl-oauth-token-file"},
		{"both sources", []string{"--sasl-mechanism", "oauthbearer", "--sasl-oauth-token-file", tokenFile, "--sasl-oauth-token-endpoint", "https://idp/token"}, "sasl-oauth-token-file", "one of them"},
		{"missing file", []string{"--sasl-mechanism", "oauthbearer", "--sasl-oauth-token-file", filepath.Join(dir, "nope")}, "sasl-oauth-token-file", "no such file"},
		{"no client id", []string{"--sasl-mechanism", "oauthbearer", "--sasl-oauth-token-endpoint", "https://idp/token", "--sasl-oauth-client-secret-file", tokenFile}, "sasl-oauth-client-id", "client id"},
		{"no secret", []string{"--sasl-mechanism", "oauthbearer", "--sasl-oauth-token-endpoint", "https://idp/token", "--sasl-oauth-client-id", "c"}, "sasl-oauth-client-secret", "BLOOMGATE_SASL_OAUTH_CLIENT_SECRET"},
		{"secret flag", []string{"--sasl-mechanism", "oauthbearer", "--sasl-oauth-token-endpoint", "https://idp/token", "--sasl-oauth-client-id", "c", "--sasl-oauth-client-secret", "s"}, "sasl-oauth-client-secret", "shows in ps"},
		{"bad url", []string{"--sasl-mechanism", "oauthbearer", "--sasl-oauth-token-endpoint", "idp/token", "--sasl-oauth-client-id", "c", "--sasl-oauth-client-secret-file", tokenFile}, "sasl-oauth-token-endpoint", "not an http(s) URL"},
		{"bad extension", []string{"--sasl-mechanism", "oauthbearer", "--sasl-oauth-token-file", tokenFile, "--sasl-oauth-extensions", "logicalCluster"}, "sasl-oauth-extensions", "key=value"},
		{"oauth setting with scram", []string{"--sasl-mechanism", "scram-sha-512", "--sasl-username", "u", "--sasl-password", "p", "--sasl-oauth-token-file", tokenFile}, "sasl-oauth-token-file", "only with oauthbearer"},
		{"region without msk", []string{"--sasl-aws-region", "eu-west-1"}, "sasl-mechanism", "aws-msk-iam"},
		{"user with msk", []string{"--sasl-mechanism", "aws-msk-iam", "--sasl-username", "u"}, "sasl-username", "not used with"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(append(append([]string{}, minimal...), tt.args...), &bytes.Buffer{})
			if err == nil {
				t.Fatal("validated")
			}
			if !strings.Contains(err.Error(), "--"+tt.setting) || !strings.Contains(err.Error(), tt.hint) {
				t.Errorf("error %q does not name --%s with hint %q", err, tt.setting, tt.hint)
			}
		})
	}
	t.Run("secret from env", func(t *testing.T) {
		t.Setenv("BLOOMGATE_SASL_OAUTH_CLIENT_SECRET", "s3cret-oauth")
		cfg, err := Load(append(append([]string{}, minimal...), "--sasl-mechanism", "oauthbearer", "--sasl-oauth-token-endpoint", "https://idp/token",
			"--sasl-oauth-client-id", "c", "--sasl-oauth-extensions", "logicalCluster=lkc-1,identityPoolId=pool-2"), &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		m, err := cfg.SASLMechanism()
		if err != nil || m == nil || m.Name() != "OAUTHBEARER" {
			t.Fatalf("mechanism %v, %v", m, err)
		}
		if m2, _ := cfg.SASLMechanism(); m2 != m {
			t.Error("the mechanism is built again: a second token cache")
		}
		var log bytes.Buffer
		slog.New(slog.NewJSONHandler(&log, nil)).Info("settings", "cfg", cfg)
		if strings.Contains(log.String(), "s3cret-oauth") || !strings.Contains(log.String(), `"sasl-oauth-client-secret":"[redacted]"`) {
			t.Errorf("the client secret is logged or not marked: %s", log.String())
		}
	})
}

// TestSASLAWSMSKIAM: aws-msk-iam takes the credentials of the AWS SDK's
// default chain (here the environment) and the region of
// --sasl-aws-region, else AWS_REGION; each login signs with them.
func TestSASLAWSMSKIAM(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDENV")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_REGION", "us-east-2")
	for _, tt := range []struct {
		args   []string
		region string
	}{
		{nil, "us-east-2"},
		{[]string{"--sasl-aws-region", "eu-west-1"}, "eu-west-1"},
	} {
		cfg, err := Load(append(append(append([]string{}, minimal...), "--sasl-mechanism", "aws-msk-iam"), tt.args...), &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		m, err := cfg.SASLMechanism()
		if err != nil {
			t.Fatal(err)
		}
		ctx := sasl.WithMetadata(context.Background(), &sasl.Metadata{Host: "b-1.example", Port: 9098})
		_, ir, err := m.Start(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var p map[string]string
		if err := json.Unmarshal(ir, &p); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(p["x-amz-credential"], "AKIDENV/") || !strings.Contains(p["x-amz-credential"], "/"+tt.region+"/kafka-cluster/") {
			t.Errorf("%v: credential %q, want AKIDENV in %s", tt.args, p["x-amz-credential"], tt.region)
		}
	}
}

// TestURLRules: --url-rules and --url-strip-params from every source make
// one key definition (presets expanded, names canonical), which the
// checkpoints record and the group's members announce, and which the
// extractor of the repartition hop and of the dedup stage (Extractor)
// applies.
func TestURLRules(t *testing.T) {
	t.Setenv("BLOOMGATE_URL_STRIP_PARAMS", "REF, utm_*")
	file := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(file, []byte("normalize: url\nurl-rules: [strip-tracking, crawler]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := load(t, "--config", file)
	if err != nil {
		t.Fatal(err)
	}
	id := cfg.KeyIdentity()
	if id.URLRules != "strip-userinfo,strip-www,strip-session-ids,strip-tracking" || id.URLStripParams != "ref,utm_*" {
		t.Errorf("key identity %+v", id)
	}
	wc, err := cfg.WorkerConfig()
	if err != nil {
		t.Fatal(err)
	}
	agreed := map[string]string{}
	for _, s := range wc.Agreement {
		agreed[s.Name] = s.Value
	}
	if agreed["url-rules"] != id.URLRules || agreed["url-strip-params"] != id.URLStripParams {
		t.Errorf("agreement %v", wc.Agreement)
	}
	ex, err := cfg.Extractor()
	if err != nil {
		t.Fatal(err)
	}
	k, err := ex.Extract(nil, []byte("https://u:p@www.example.com/a?ref=x&utm_source=y&id=1"), nil, nil)
	if err != nil || string(k) != "https://example.com/a?id=1" {
		t.Errorf("Extract = %q, %v", k, err)
	}

	plain, err := load(t, "--normalize", "url", "--url-strip-params", "")
	if err != nil {
		t.Fatal(err)
	}
	if id := plain.KeyIdentity(); id.URLRules != "" || id.URLStripParams != "" {
		t.Errorf("no rules: key identity %+v", id)
	}
}
