package deploy

import (
	"io/fs"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// TestDocLinks keeps the documentation's references resolvable: every
// relative Markdown link in README.md, SECURITY.md, CHANGELOG.md and docs/
// names a file that exists and, with a #fragment, a heading of it; every
// docs/<name>.md named in those files, in Go sources or in the Makefile
// exists; and a section named as docs/<name>.md, "Section" (or "Section" in
// docs/<name>.md) is a heading of that file, the bold lead of a paragraph or
// the first words of a line (sections moved between files show here).
func TestDocLinks(t *testing.T) {
	docs := []string{"README.md", "SECURITY.md", "CHANGELOG.md"}
	mds, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil || len(mds) < 10 {
		t.Fatalf("docs/*.md: %d files, %v", len(mds), err)
	}
	for _, m := range mds {
		docs = append(docs, "docs/"+filepath.Base(m))
	}
	heads := map[string][]string{} // file -> heading slugs and texts
	headings := func(rel string) []string {
		if h, ok := heads[rel]; ok {
			return h
		}
		var h []string
		fence := false
		for _, line := range strings.Split(string(repoFile(t, rel)), "\n") {
			if strings.HasPrefix(line, "```") {
				fence = !fence
				continue
			}
			if !fence && strings.HasPrefix(line, "#") {
				if text := strings.TrimLeft(line, "#"); strings.HasPrefix(text, " ") {
					h = append(h, strings.TrimSpace(text))
				}
			}
		}
		heads[rel] = h
		return h
	}
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, doc := range docs {
		text := string(repoFile(t, doc))
		for _, m := range link.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			rel := doc
			if path != "" {
				rel = filepath.ToSlash(filepath.Join(filepath.Dir(doc), path))
			}
			if !exists(rel) {
				t.Errorf("%s: link %s: %s does not exist", doc, target, rel)
				continue
			}
			if anchor != "" && strings.HasSuffix(rel, ".md") && !hasSlug(headings(rel), anchor) {
				t.Errorf("%s: link %s: %s has no heading #%s", doc, target, rel, anchor)
			}
		}
	}

	sources := append([]string{"Makefile"}, docs...)
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "dist" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".go") {
			rel, _ := filepath.Rel(root, p)
			sources = append(sources, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile(`docs/([\w.-]+\.md)`)
	section := regexp.MustCompile(`docs/([\w.-]+\.md)[,:]? \(?"([^"]{3,80})"`)
	sectionIn := regexp.MustCompile(`"([^"]{3,80})" in docs/([\w.-]+\.md)`)
	wrap := regexp.MustCompile(`\s*\n\s*(//\s*)?`)
	for _, src := range sources {
		text := string(repoFile(t, src))
		for _, m := range named.FindAllStringSubmatch(text, -1) {
			if !exists("docs/" + m[1]) {
				t.Errorf("%s names docs/%s, which does not exist", src, m[1])
			}
		}
		flat := wrap.ReplaceAllString(text, " ") // references wrapped over lines and comment lines
		check := func(doc, sec string) {
			rel := "docs/" + doc
			if !exists(rel) {
				return
			}
			sec = strings.TrimRight(sec, ",.")
			for _, h := range headings(rel) {
				if strings.Contains(h, sec) {
					return
				}
			}
			body := string(repoFile(t, rel))
			if strings.Contains(body, "**"+sec) || strings.Contains(body, "\n"+sec) {
				return
			}
			t.Errorf("%s names section %q of %s, which has no such heading", src, sec, rel)
		}
		for _, m := range section.FindAllStringSubmatch(flat, -1) {
			check(m[1], m[2])
		}
		for _, m := range sectionIn.FindAllStringSubmatch(flat, -1) {
			check(m[2], m[1])
		}
	}
}

// hasSlug reports whether one of headings has the GitHub anchor slug:
// lower case, letters, digits, '-' and '_' kept, spaces as '-', the rest
// dropped.
func hasSlug(headings []string, slug string) bool {
	for _, h := range headings {
		var b strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case r == ' ':
				b.WriteByte('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
				b.WriteRune(r)
			}
		}
		if b.String() == slug {
			return true
		}
	}
	return false
}

// TestReadmeQuickStart keeps the README's two set-up commands what CI and
// the demo run: the first code block of "Quick start" starts with
// `make run` and `make test`, and .ci/run runs `make test`.
func TestReadmeQuickStart(t *testing.T) {
	readme := string(repoFile(t, "README.md"))
	_, sec, ok := strings.Cut(readme, "\n## Quick start\n")
	if !ok {
		t.Fatal(`README.md has no section "## Quick start"`)
	}
	_, block, ok := strings.Cut(sec, "```sh\n")
	if !ok {
		t.Fatal(`README.md "Quick start" has no sh block`)
	}
	block, _, _ = strings.Cut(block, "```")
	var cmds []string
	for _, line := range strings.Split(block, "\n") {
		if cmd, _, _ := strings.Cut(line, "#"); strings.TrimSpace(cmd) != "" {
			cmds = append(cmds, strings.TrimSpace(cmd))
		}
	}
	if len(cmds) != 2 || cmds[0] != "make run" || cmds[1] != "make test" {
		t.Errorf("README.md Quick start commands = %q, want [make run, make test]", cmds)
	}
	ci := string(repoFile(t, ".ci/run"))
	if !regexp.MustCompile(`(?m)^make test$`).MatchString(ci) {
		t.Errorf(".ci/run does not run the README's test command, make test:\n%s", ci)
	}
}
