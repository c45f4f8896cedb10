package config

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// The reference part of docs/settings.md lies between these lines;
// WriteReference writes what goes between them (TestSettingsReference
// checks it, BLOOMGATE_UPDATE_DOCS=1 rewrites it).
const (
	ReferenceBegin = "<!-- settings reference: generated from internal/config/settings.go; BLOOMGATE_UPDATE_DOCS=1 go test ./internal/config -run SettingsReference -->"
	ReferenceEnd   = "<!-- end of settings reference -->"
)

// WriteReference writes the reference of every setting as Markdown: a
// table per section of --help, each setting with its kind, its default
// as --help shows it, its environment variable, its help words and the
// documentation's own (the table's doc column).
func WriteReference(w io.Writer) {
	cfg := Default()
	fs := cfg.FlagSet("run")
	for _, title := range sectionOrder {
		fmt.Fprintf(w, "\n### %s\n\n", title)
		fmt.Fprintln(w, "| setting | default | environment | meaning |")
		fmt.Fprintln(w, "|---|---|---|---|")
		for _, s := range settings {
			if s.section != title {
				continue
			}
			f := fs.Lookup(s.name)
			kind, usage := flag.UnquoteUsage(f)
			if k, ok := f.Value.(interface{ Kind() string }); ok && kind == "value" {
				kind = k.Kind()
			}
			name := "`--" + s.name + "`"
			if !isBoolValue(f.Value) {
				name = "`--" + s.name + " " + kind + "`"
			}
			def := "—"
			if f.DefValue != "" {
				def = "`" + f.DefValue + "`"
			}
			meaning := markdownText(usage)
			if s.doc != "" {
				meaning += ". " + s.doc
			}
			fmt.Fprintf(w, "| %s | %s | `%s` | %s |\n", name, def, envName(s.name), meaning)
		}
	}
	fmt.Fprintln(w)
}

// markdownText keeps help words from being read as Markdown in a table
// cell: a pipe, an emphasis star, an HTML tag.
func markdownText(s string) string {
	return strings.NewReplacer("|", `\|`, "*", `\*`, "<", "&lt;", ">", "&gt;").Replace(s)
}
