package deploy

import (
	"io/fs"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestMakeFuzzRunsEveryTarget: `make fuzz` (part of `make test`) runs
// every fuzz target of the module: FUZZ_TARGETS in the Makefile lists each
// `func FuzzX(f *testing.F)` as package:FuzzX, and nothing else.
func TestMakeFuzzRunsEveryTarget(t *testing.T) {
	fuzzFunc := regexp.MustCompile(`(?m)^func (Fuzz\w+)\(f \*testing\.F\)`)
	var found []string
	for _, top := range []string{"internal", "cmd"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, "_test.go") {
				return err
			}
			rel, err := filepath.Rel(root, filepath.Dir(path))
			if err != nil {
				return err
			}
			for _, m := range fuzzFunc.FindAllStringSubmatch(string(repoFile(t, filepath.Join(rel, d.Name()))), -1) {
				found = append(found, "./"+filepath.ToSlash(rel)+":"+m[1])
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	mk := string(repoFile(t, "Makefile"))
	block := regexp.MustCompile(`(?s)FUZZ_TARGETS := \\\n(.*?)\n\n`).FindStringSubmatch(mk)
	if block == nil {
		t.Fatal("no FUZZ_TARGETS block in the Makefile")
	}
	var listed []string
	for _, line := range strings.Split(block[1], "\n") {
		if f := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(line), "\\")); f != "" {
			listed = append(listed, f)
		}
	}
	slices.Sort(found)
	slices.Sort(listed)
	if !slices.Equal(found, listed) {
		t.Errorf("FUZZ_TARGETS lists\n  %s\nthe module's fuzz targets are\n  %s", strings.Join(listed, "\n  "), strings.Join(found, "\n  "))
	}
}
