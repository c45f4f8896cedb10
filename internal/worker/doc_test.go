package worker

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDocListsEveryFile: the package comment's layout names every file of
// the package, and no file that is gone.
func TestDocListsEveryFile(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || f == "doc.go" {
			continue
		}
		have[f] = true
		if !strings.Contains(string(doc), "//\t"+f+" ") {
			t.Errorf("doc.go does not list %s", f)
		}
	}
	for _, line := range strings.Split(string(doc), "\n") {
		if f, _, ok := strings.Cut(strings.TrimPrefix(line, "//\t"), " "); ok && strings.HasPrefix(line, "//\t") && strings.HasSuffix(f, ".go") && !have[f] {
			t.Errorf("doc.go lists %s, which is gone", f)
		}
	}
}
