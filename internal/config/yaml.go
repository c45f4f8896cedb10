package config

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// FileError is every problem found in the config file, each naming its
// line: a file is fixed in one go, not one rerun per mistake. Load adds
// the problems Validate finds in the settings read (withInvalid), each
// where its value was set.
type FileError struct {
	File string
	Errs []error // *SettingError, *UnknownSettingError, *LineError or a syntax error
	// parsed: the file is a map of settings (no syntax error), so the
	// settings it set are known.
	parsed bool
}

// LineError is a problem of one line of the config file that is not a
// bad value: a setting given twice, a list for a single value.
type LineError struct {
	File    string
	Line    int
	Setting string
	Problem string
}

func (e *LineError) Error() string { return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Problem) }

// withInvalid adds the problems of invalid (Validate's) to e: those of
// settings the file set, by line among the file's own problems, then the
// others (flags, variables, defaults). A setting whose value in the file
// was refused is left out: Validate saw its default, not the file's value.
func (e *FileError) withInvalid(invalid error) *FileError {
	if invalid == nil {
		return e
	}
	refused := map[string]bool{}
	for _, err := range e.Errs {
		var se *SettingError
		var le *LineError
		switch {
		case errors.As(err, &se):
			refused[se.Setting] = true
		case errors.As(err, &le) && le.Setting != "":
			refused[le.Setting] = true
		}
	}
	var more []error
	if j, ok := invalid.(interface{ Unwrap() []error }); ok {
		more = j.Unwrap()
	} else {
		more = []error{invalid}
	}
	out := &FileError{File: e.File, Errs: slices.Clone(e.Errs), parsed: e.parsed}
	for _, err := range more {
		var se *SettingError
		if errors.As(err, &se) && refused[se.Setting] {
			continue
		}
		out.Errs = append(out.Errs, err)
	}
	// The file's lines first, in order; the rest keeps Validate's order.
	key := func(err error) int {
		if l := lineOf(err); l > 0 {
			return l
		}
		return math.MaxInt
	}
	slices.SortStableFunc(out.Errs, func(a, b error) int { return cmp.Compare(key(a), key(b)) })
	return out
}

// lineOf is the line of the config file a problem is on (0: none).
func lineOf(err error) int {
	var se *SettingError
	var ue *UnknownSettingError
	var le *LineError
	switch {
	case errors.As(err, &se) && se.Source == FromFile:
		return se.Line
	case errors.As(err, &ue):
		return ue.Line
	case errors.As(err, &le):
		return le.Line
	}
	return 0
}

func (e *FileError) Error() string {
	lines := make([]string, len(e.Errs))
	for i, err := range e.Errs {
		lines[i] = err.Error()
	}
	return strings.Join(lines, "\n")
}

func (e *FileError) Unwrap() []error { return e.Errs }

// UnknownSettingError is a key of the config file that names no setting.
type UnknownSettingError struct {
	File        string
	Line        int
	Name        string
	Suggestions []string
}

func (e *UnknownSettingError) Error() string {
	return fmt.Sprintf("%s:%d: unknown setting %q%s", e.File, e.Line, e.Name, didYouMean("", e.Suggestions))
}

// yamlParser reads the config file for ff.Parse. It hands every scalar to
// the flag as written in the file: YAML's type guessing never applies, so
// `output: no`, `group: on` or `capacity: 1e7` mean the text they show (the
// YAML 1.1 parser of ffyaml turns y/n/on/off into booleans). Nested maps
// join their keys with "-" (tls: {ca-file: x} sets tls-ca-file); a list
// sets a list flag once per element; an empty value sets the empty string.
// Settings already given by a flag or an environment variable are left as
// they are. Every problem is collected into one *FileError: unknown keys
// (with the closest setting names), bad values, keys given twice.
// Each value set is recorded in rec with its line.
func yamlParser(fs *flag.FlagSet, file *string, rec *setRecorder) func(r io.Reader, set func(name, value string) error) error {
	return func(r io.Reader, _ func(name, value string) error) error {
		var doc yaml.Node
		if err := yaml.NewDecoder(r).Decode(&doc); err != nil {
			if errors.Is(err, io.EOF) {
				return nil // empty file
			}
			return &FileError{File: *file, Errs: []error{syntaxError(*file, err)}}
		}
		if len(doc.Content) == 0 {
			return nil
		}
		root := doc.Content[0]
		if root.Kind != yaml.MappingNode {
			return &FileError{File: *file, Errs: []error{fmt.Errorf("%s:%d: want a map of settings (name: value)", *file, root.Line)}}
		}
		w := &yamlWalk{fs: fs, file: *file, rec: rec, seen: map[string]int{}, provided: map[string]bool{}}
		fs.Visit(func(f *flag.Flag) { w.provided[f.Name] = true })
		fs.VisitAll(func(f *flag.Flag) { w.names = append(w.names, f.Name) })
		prev := rec.at
		w.walk("", root)
		rec.at = prev
		if len(w.errs) > 0 {
			return &FileError{File: *file, Errs: w.errs, parsed: true}
		}
		return nil
	}
}

type yamlWalk struct {
	fs       *flag.FlagSet
	file     string
	rec      *setRecorder
	names    []string
	seen     map[string]int // setting → line it was set on
	provided map[string]bool
	errs     []error
}

func (w *yamlWalk) fail(line int, setting, format string, args ...any) {
	w.errs = append(w.errs, &LineError{File: w.file, Line: line, Setting: setting, Problem: fmt.Sprintf(format, args...)})
}

func (w *yamlWalk) walk(prefix string, m *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		name := k.Value
		if prefix != "" {
			name = prefix + "-" + name
		}
		if v.Kind == yaml.AliasNode {
			v = v.Alias
		}
		if v.Kind == yaml.MappingNode {
			w.walk(name, v)
			continue
		}
		f := w.fs.Lookup(name)
		if f == nil {
			w.errs = append(w.errs, &UnknownSettingError{File: w.file, Line: k.Line, Name: name, Suggestions: suggest(name, w.names)})
			continue
		}
		if prev, dup := w.seen[name]; dup {
			w.fail(k.Line, "", "%s is already set on line %d", name, prev)
			continue
		}
		w.seen[name] = k.Line
		switch v.Kind {
		case yaml.ScalarNode:
			val := v.Value
			if v.Tag == "!!null" {
				val = ""
			}
			w.set(f, v.Line, val)
		case yaml.SequenceNode:
			if _, ok := underlying(f.Value).(interface{ isList() }); !ok {
				w.fail(v.Line, name, "%s takes one value, not a list", name)
				continue
			}
			for _, e := range v.Content {
				if e.Kind != yaml.ScalarNode {
					w.fail(e.Line, name, "%s: want a list of plain values", name)
					continue
				}
				w.set(f, e.Line, e.Value)
			}
		default:
			w.fail(v.Line, name, "%s: unsupported value", name)
		}
	}
}

func (w *yamlWalk) set(f *flag.Flag, line int, val string) {
	if w.provided[f.Name] {
		return // a flag or environment variable overrides the file
	}
	if isBoolValue(f.Value) {
		val = yamlBool(val)
	}
	w.rec.at = origin{source: FromFile, file: w.file, line: line}
	if err := w.fs.Set(f.Name, val); err != nil {
		w.errs = append(w.errs, &SettingError{Setting: f.Name, Problem: problemOf(f.Value, val, err), Source: FromFile, File: w.file, Line: line})
	}
}

// syntaxError places a YAML syntax error on its line when the parser names
// one ("yaml: line 3: …").
func syntaxError(file string, err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if n, tail, ok := strings.Cut(rest, ": "); ok {
			if line, err := strconv.Atoi(n); err == nil {
				return fmt.Errorf("%s:%d: not valid YAML: %s", file, line, tail)
			}
		}
	}
	return fmt.Errorf("%s: not valid YAML: %s", file, msg)
}

// yamlBool accepts the YAML 1.1 spellings for the switches (on/off, yes/no).
func yamlBool(s string) string {
	switch strings.ToLower(s) {
	case "y", "yes", "on":
		return "true"
	case "n", "no", "off":
		return "false"
	}
	return s
}
