package config

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFilterSetting: --filter comes from a flag, the environment and the
// file like every setting, is validated, and refuses what the fingerprint
// filter cannot do, naming the setting.
func TestFilterSetting(t *testing.T) {
	base := []string{"--brokers", "a:1", "--input", "in", "--output", "out"}
	cfg, err := Load(base, &bytes.Buffer{})
	if err != nil || cfg.Filter != FilterRing {
		t.Fatalf("default: %q, %v", cfg.Filter, err)
	}
	cfg, err = Load(append(base, "--filter", "fingerprint", "--generations", "8"), &bytes.Buffer{})
	if err != nil || cfg.Filter != FilterFingerprint {
		t.Fatalf("flag: %q, %v", cfg.Filter, err)
	}
	t.Setenv("BLOOMGATE_FILTER", "fingerprint")
	if cfg, err = Load(base, &bytes.Buffer{}); err != nil || cfg.Filter != FilterFingerprint {
		t.Fatalf("environment: %q, %v", cfg.Filter, err)
	}
	t.Setenv("BLOOMGATE_FILTER", "")
	file := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(file, []byte("filter: fingerprint\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if cfg, err = Load(append(base, "--config", file), &bytes.Buffer{}); err != nil || cfg.Filter != FilterFingerprint {
		t.Fatalf("file: %q, %v", cfg.Filter, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--filter", "cuckoo"}, "filter"},
		{[]string{"--filter", "fingerprint", "--generations", "8", "--fpr", "1e-20", "--capacity", "1G"}, "the fingerprint filter cannot be planned at this rate"},
		{[]string{"--fpr", "1e-15"}, "512-bit blocks"},
	} {
		_, err := Load(append(base, tc.args...), &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error with %q", tc.args, err, tc.want)
		}
	}
	// Exact mode works with either kind.
	if cfg, err = Load(append(base, "--filter", "fingerprint", "--generations", "8", "--exact", "--exact-dir", t.TempDir()), &bytes.Buffer{}); err != nil || !cfg.Exact {
		t.Errorf("--filter fingerprint --exact: %v", err)
	}
	var help bytes.Buffer
	if _, err := Load([]string{"--help"}, &help); err != ErrHelp || !strings.Contains(help.String(), "--filter") ||
		!strings.Contains(help.String(), "BLOOMGATE_FILTER") {
		t.Errorf("--help lacks the filter setting: %v\n%s", err, help.String())
	}
}
