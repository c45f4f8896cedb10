package config

import (
	"bytes"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestSettingsReference: the reference part of docs/settings.md is what
// WriteReference writes from the table of settings;
// BLOOMGATE_UPDATE_DOCS=1 rewrites it.
func TestSettingsReference(t *testing.T) {
	file := filepath.Join("..", "..", "docs", "settings.md")
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	before, rest, ok1 := strings.Cut(doc, ReferenceBegin+"\n")
	old, after, ok2 := strings.Cut(rest, ReferenceEnd)
	if !ok1 || !ok2 {
		t.Fatalf("%s lacks the lines %q and %q around its reference", file, ReferenceBegin, ReferenceEnd)
	}
	var ref bytes.Buffer
	WriteReference(&ref)
	if ref.String() == old {
		return
	}
	if os.Getenv("BLOOMGATE_UPDATE_DOCS") == "1" {
		if err := os.WriteFile(file, []byte(before+ReferenceBegin+"\n"+ref.String()+ReferenceEnd+after), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("the reference in %s is stale; rerun with BLOOMGATE_UPDATE_DOCS=1 go test ./internal/config -run SettingsReference", file)
}

// TestSettingsTable: every setting has a name once, a section of --help
// and an owner, and the help words of one.
func TestSettingsTable(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range settings {
		if seen[s.name] {
			t.Errorf("%s: twice in the table", s.name)
		}
		seen[s.name] = true
		if s.owner == "" || s.help == "" || s.field == nil {
			t.Errorf("%s: owner %q, help %q, field %v: each is needed", s.name, s.owner, s.help, s.field)
		}
	}
}

// TestWorkerRefusesInConfigWords: a value that `bloomgate run` refuses
// and the worker refuses too is refused in the same words, the worker's
// (config checks with worker.Check…, not with words of its own).
func TestWorkerRefusesInConfigWords(t *testing.T) {
	for _, tc := range []struct {
		setting string
		set     func(*Run)
	}{
		{"partitioning", func(c *Run) { c.Partitioning = "random" }},
		{"compression", func(c *Run) { c.Compression = "GZIP" }},
		{"isolation-level", func(c *Run) { c.IsolationLevel = "serializable" }},
		{"on-restore-failure", func(c *Run) { c.OnRestoreFailure = "guess" }},
		{"on-missing-key", func(c *Run) { c.OnMissingKey = OnMissingDeadLetter }},
		{"on-unwritable", func(c *Run) { c.OnUnwritable = "fail" }},
		{"max-replay", func(c *Run) { c.MaxReplay = -1 }},
		{"batch-size", func(c *Run) { c.BatchSize = 2_000_000 }},
		{"session-timeout", func(c *Run) { c.SessionTimeout = -time.Second }},
	} {
		t.Run(tc.setting, func(t *testing.T) {
			cfg := Default()
			cfg.Brokers, cfg.Input, cfg.Output = []string{"127.0.0.1:9092"}, "in", "out"
			tc.set(&cfg)
			var problem string
			for _, err := range unjoin(cfg.Validate()) {
				var se *SettingError
				if errors.As(err, &se) && se.Setting == tc.setting {
					problem = se.Problem
				}
			}
			if problem == "" {
				t.Fatalf("config accepts it: %v", cfg.Validate())
			}
			wc, err := cfg.WorkerConfig()
			if err != nil {
				t.Fatal(err)
			}
			want := tc.setting + ": " + problem
			if err := wc.Validate(); err == nil || !slices.Contains(strings.Split(err.Error(), "\n"), want) {
				t.Errorf("worker: %v\nwant the line %q", err, want)
			}
		})
	}
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// TestAgreementFromTable: the settings announced to the group are the
// table's agree column, with the values the members compare.
func TestAgreementFromTable(t *testing.T) {
	cfg, wc := workerConfig(t, "--key", "json:url", "--normalize", "url", "--url-rules", "strip-www", "--exact", "--repartition")
	got := map[string]string{}
	for _, s := range wc.Agreement {
		got[s.Name] = s.Value
	}
	want := map[string]string{
		"key": "json:url", "normalize": "url", "exact": "true", "input": "in", "repartition": "true",
		"url-rules": cfg.KeyIdentity().URLRules, "url-strip-params": cfg.KeyIdentity().URLStripParams,
	}
	if !maps.Equal(got, want) {
		t.Errorf("announced %v, want %v", got, want)
	}
}
