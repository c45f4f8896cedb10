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
