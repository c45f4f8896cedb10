package buildinfo

import (
	"strings"
	"testing"
)

func TestString(t *testing.T) {
	old := Version
	defer func() { Version = old }()
	Version = "v9.9.9"
	if got := String(); got != "v9.9.9" {
		t.Fatalf("String() = %q with Version set", got)
	}
	Version = ""
	if got := String(); !strings.HasPrefix(got, "dev") && !strings.HasPrefix(got, "v") {
		t.Fatalf("String() = %q, want dev… or a module version", got)
	}
	if !strings.HasPrefix(GoVersion(), "go") {
		t.Fatalf("GoVersion() = %q", GoVersion())
	}
}

// TestPseudoRevision: the commit is read from the three pseudo-version
// forms, and not from a release version.
func TestPseudoRevision(t *testing.T) {
	for v, want := range map[string]string{
		"v0.0.0-20260101000000-0123456789ab":              "0123456789ab",
		"v1.2.4-0.20260101000000-0123456789ab":            "0123456789ab",
		"v1.2.3-pre.0.20260101000000-0123456789ab":        "0123456789ab",
		"v2.0.0-20260101000000-0123456789ab+incompatible": "0123456789ab",
		"v1.2.3":      "",
		"v1.2.3-rc.1": "",
		"(devel)":     "",
	} {
		got := ""
		if m := pseudoRevision.FindStringSubmatch(v); m != nil {
			got = m[1]
		}
		if got != want {
			t.Errorf("%s: commit %q, want %q", v, got, want)
		}
	}
}

// TestRead: a link-time version ending in -dirty (git describe --dirty)
// sets the dirty flag. (A test binary records no dependencies: the
// built command's are checked in cmd/bloomgate and test/deploy.)
func TestRead(t *testing.T) {
	old := Version
	defer func() { Version = old }()
	Version = "v1.2.3-4-gabcdef0-dirty"
	info := Read()
	if info.Version != Version || info.GoVersion != GoVersion() || !info.Dirty || info.Platform == "" {
		t.Errorf("Read() = %+v", info)
	}
}
