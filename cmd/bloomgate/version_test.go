package main

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/bloomgate/bloomgate/internal/buildinfo"
)

// TestVersionJSON: `version --json` of the built binary names the module,
// the Go version and the dependencies compiled in; `version` prints one
// line; an unknown flag is a usage error (it was ignored before).
func TestVersionJSON(t *testing.T) {
	out, err := exec.Command(binary, "version", "--json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var info buildinfo.Info
	if err := json.Unmarshal(out, &info); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	kfake := false
	for _, d := range info.Deps {
		kfake = kfake || d.Path == "github.com/twmb/franz-go/pkg/kfake"
	}
	if info.Module != "github.com/bloomgate/bloomgate" || !strings.HasPrefix(info.GoVersion, "go") || info.Version == "" || !kfake {
		t.Errorf("version --json: %+v", info)
	}
	out, err = exec.Command(binary, "version").Output()
	if err != nil || !strings.HasPrefix(string(out), "bloomgate "+info.Version+" (") || strings.Count(string(out), "\n") != 1 {
		t.Errorf("version: %q, %v", out, err)
	}
	if err := exec.Command(binary, "version", "--jsn").Run(); err == nil {
		t.Error("version --jsn: exit 0, want a usage error")
	}
}
