package config

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// TestFlagErrors: a mistake on the command line is one line that names
// the flag, quotes the value and shows what would be accepted.
func TestFlagErrors(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--window", "7x"}, `--window: "7x": unknown unit "x"; use ns, us, ms, s, m, h, d or w, e.g. 90s, 15m, 36h, 7d or 1d12h`},
		{[]string{"--max-time-jump=3M"}, `--max-time-jump: "3M": M could mean minutes or months; write m for minutes, or days for months (e.g. 30d)`},
		{[]string{"--capacity", "50 mio"}, `--capacity: "50 mio": unknown suffix "mio"; use k, m, g or b, t (thousand, million, billion, trillion), e.g. 10000000, 10_000_000, 10M, 2.5k or 1e7`},
		{[]string{"--generations", "1e30"}, `--generations: "1e30" is too large: at most 9223372036854775807`},
		{[]string{"--fpr", "one"}, `--fpr: "one" is not a rate: use a fraction or a percentage, e.g. 0.01 or 1%`},
		{[]string{"--max-key-bytes", "4k"}, `--max-key-bytes: "4k" is ambiguous: write 4KiB (powers of 1024) or 4kB (powers of 1000)`},
		{[]string{"--tls-enabled=maybe"}, `--tls-enabled: "maybe" is not true or false`},
		{[]string{"--windw", "1h"}, `unknown flag --windw; did you mean --window?`},
		{[]string{"--checkpoint_url", "mem://x"}, `unknown flag --checkpoint_url; did you mean --checkpoint-url?`},
		{[]string{"--batch", "10"}, `unknown flag --batch; did you mean --batch-size or --batch-timeout?`},
		{[]string{"--frobnicate"}, `unknown flag --frobnicate`},
		{[]string{"--window"}, `--window: needs a value, e.g. --window 24h`},
		{[]string{"--capacity"}, `--capacity: needs a value, e.g. --capacity 10M`},
		{[]string{"--rebalance-timeout"}, `--rebalance-timeout: needs a value, e.g. --rebalance-timeout 30s`},
		{[]string{"--input"}, `--input: needs a value, e.g. --input topic`},
		{[]string{"---window", "1h"}, `bad flag syntax "---window": write --name value or --name=value`},
		{[]string{"window", "1h"}, `unexpected argument "window": flags start with --; did you mean --window?`},
		{[]string{"--config", filepath.Join("testdata", "missing.yaml")}, `--config: cannot read "testdata/missing.yaml": no such file or directory`},
	}
	for _, tc := range cases {
		_, err := load(t, tc.args...)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%v:\n got %v\nwant %s", tc.args, err, tc.want)
		}
	}
}

// TestEnvErrors: a bad environment variable names itself and its flag.
func TestEnvErrors(t *testing.T) {
	t.Setenv("BLOOMGATE_WINDOW", "7x")
	_, err := load(t)
	want := `BLOOMGATE_WINDOW (--window): "7x": unknown unit "x"; use ns, us, ms, s, m, h, d or w, e.g. 90s, 15m, 36h, 7d or 1d12h`
	if err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
	var se *SettingError
	if !errors.As(err, &se) || se.Setting != "window" || se.Source != FromEnv {
		t.Fatalf("error %#v is not a SettingError of window from the environment", err)
	}
	// A flag overrides the variable, which is then not read.
	if cfg, err := load(t, "--window", "2d"); err != nil || cfg.Window != 48*time.Hour {
		t.Fatalf("--window over a bad environment variable: %v, %v", cfg, err)
	}
}

// TestYAMLErrorsAllAtOnce: every problem of a config file is reported, each
// with its line (golden file testdata/errors.golden; -update rewrites it).
func TestYAMLErrorsAllAtOnce(t *testing.T) {
	file := filepath.Join("testdata", "errors.yaml")
	_, err := Load([]string{"--config", file}, &bytes.Buffer{})
	var fe *FileError
	if !errors.As(err, &fe) {
		t.Fatalf("Load = %v, want a *FileError", err)
	}
	golden := filepath.Join("testdata", "errors.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(err.Error()+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, rerr := os.ReadFile(golden)
	if rerr != nil {
		t.Fatal(rerr)
	}
	if got := err.Error() + "\n"; got != string(want) {
		t.Fatalf("errors of %s:\n%s\nwant (%s):\n%s", file, got, golden, want)
	}
	var unknown *UnknownSettingError
	if !errors.As(err, &unknown) || unknown.Line != 5 || unknown.Suggestions[0] != "window" {
		t.Fatalf("first unknown setting: %+v", unknown)
	}
}

// TestYAMLInvalidValuesWithParseErrors: a file whose values partly do not
// parse and partly parse but are invalid gets one report of both, each on
// its line, with the invalid settings of flags and variables after them
// under their own names (golden file testdata/invalid.golden).
func TestYAMLInvalidValuesWithParseErrors(t *testing.T) {
	t.Setenv("BLOOMGATE_WRITE_TIMEOUT", "0s")
	file := filepath.Join("testdata", "invalid.yaml")
	_, err := Load([]string{"--config", file, "--commit-interval", "0s"}, &bytes.Buffer{})
	var fe *FileError
	if !errors.As(err, &fe) {
		t.Fatalf("Load = %v, want a *FileError", err)
	}
	golden := filepath.Join("testdata", "invalid.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(err.Error()+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, rerr := os.ReadFile(golden)
	if rerr != nil {
		t.Fatal(rerr)
	}
	if got := err.Error() + "\n"; got != string(want) {
		t.Fatalf("errors of %s:\n%s\nwant (%s):\n%s", file, got, golden, want)
	}
	// The refused capacity is not validated again at its default.
	if n := strings.Count(err.Error(), "capacity"); n != 1 {
		t.Errorf("capacity named %d times, want once (its parse error):\n%v", n, err)
	}
}

// TestValidationNamesWhereSet: a value Validate refuses is named where the
// user set it: a flag as --name, a variable with its flag, a line of the
// file, and a setting left at its default as not set.
func TestValidationNamesWhereSet(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(file, []byte("input: in\noutput: out\n\nfpr: 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"flag", nil, []string{"--fpr", "2"}, "--fpr: 2: must be strictly between 0 and 1"},
		{"variable", []string{"BLOOMGATE_FPR", "2"}, nil, "BLOOMGATE_FPR (--fpr): 2: must be strictly between 0 and 1"},
		{"file", nil, []string{"--config", file}, file + ":4: fpr: 2: must be strictly between 0 and 1"},
		{"flag over file", nil, []string{"--config", file, "--fpr", "3"}, "--fpr: 3: must be strictly between 0 and 1"},
		{"default", nil, []string{"--session-timeout", "1s"}, "--heartbeat-interval (not set): 1s: must be positive and below --session-timeout (1s)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != nil {
				t.Setenv(tc.env[0], tc.env[1])
			}
			_, err := load(t, tc.args...)
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("got %v\nwant it to begin with %s", err, tc.want)
			}
			if strings.Contains(err.Error(), "(env ") {
				t.Errorf("names a variable that was not set: %v", err)
			}
		})
	}
}

func TestYAMLSyntaxErrorHasLine(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(file, []byte("input: a\noutput: b\nwindow: 1h\n\tkey: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load([]string{"--config", file}, &bytes.Buffer{})
	// The line is the YAML parser's (it may name the line a construct starts on).
	if err == nil || !regexp.MustCompile(`^`+regexp.QuoteMeta(file)+`:\d+: not valid YAML: `).MatchString(err.Error()) {
		t.Fatalf("got %v, want a syntax error placed on a line", err)
	}
}
