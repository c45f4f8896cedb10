package proctest

import (
	"os"
	"os/exec"
	"testing"
)

// requireToolsEnv, set to 1 (as `make test` does), turns a missing external
// tool from a skip into a failure.
const requireToolsEnv = "BLOOMGATE_REQUIRE_TOOLS"

// Tool is an external program a test needs, e.g. kcat or chromium.
type Tool struct {
	// Env names the variable that holds the program's path; when set, its
	// value is used as it is.
	Env string
	// Names are looked up on PATH, in order, when Env is unset.
	Names []string
	// Skip is the reason the test is skipped when the program is missing.
	Skip string
	// Fail is the failure message when it is missing and
	// BLOOMGATE_REQUIRE_TOOLS=1.
	Fail string
}

// Path returns the program's path, or skips or fails t (see Tool).
func (tool Tool) Path(t testing.TB) string {
	t.Helper()
	if p := os.Getenv(tool.Env); tool.Env != "" && p != "" {
		return p
	}
	for _, name := range tool.Names {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv(requireToolsEnv) == "1" {
		t.Fatal(tool.Fail)
	}
	t.Skip(tool.Skip)
	return ""
}
