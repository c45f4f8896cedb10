package config

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
