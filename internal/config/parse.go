package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
)

// Source says where a value came from.
type Source int

const (
	// FromAny: a flag or its environment variable, not known which (a
	// Run built in code, not by Parse).
	FromAny Source = iota
	FromFlag
	FromEnv
	FromFile
	// FromDefault: not set anywhere; the default applies.
	FromDefault
)

// origin is where a setting's value came from: a flag, an environment
// variable, or a line of the config file.
type origin struct {
	source Source
	file   string
	line   int
}

// SettingError is one invalid setting. Its message names the setting where
// the user wrote it, the value, and how to fix it.
type SettingError struct {
	Setting string // the flag name, e.g. "fpr"
	Problem string
	Source  Source
	File    string // with FromFile
	Line    int    // with FromFile
}

func (e *SettingError) Error() string {
	switch e.Source {
	case FromFlag:
		return fmt.Sprintf("--%s: %s", e.Setting, e.Problem)
	case FromEnv:
		return fmt.Sprintf("%s (--%s): %s", envName(e.Setting), e.Setting, e.Problem)
	case FromFile:
		return fmt.Sprintf("%s:%d: %s: %s", e.File, e.Line, e.Setting, e.Problem)
	case FromDefault:
		return fmt.Sprintf("--%s (not set): %s", e.Setting, e.Problem)
	}
	return fmt.Sprintf("--%s (env %s): %s", e.Setting, envName(e.Setting), e.Problem)
}

// UnknownFlagError is a flag the command does not define.
type UnknownFlagError struct {
	Name        string
	Suggestions []string // the closest flag names, for "did you mean"
}

func (e *UnknownFlagError) Error() string {
	return "unknown flag --" + e.Name + didYouMean("--", e.Suggestions)
}

// ParseFlags parses args into fs as fs.Parse does, but prints nothing (the
// flag package would print the whole usage after every mistake) and
// returns an error a user can act on, in one line: a *SettingError naming
// the flag, the value and an accepted example; an *UnknownFlagError with
// the closest flag names; or flag.ErrHelp for -h and --help, whose usage
// the caller prints. Arguments after the flags are left in fs.Args().
func ParseFlags(fs *flag.FlagSet, args []string) error {
	rec := recordSets(fs)
	defer rec.restore()
	return rec.parseArgs(args)
}

// setRecorder wraps every flag.Value of a set to remember the first failed
// Set with its flag name and value: the flag package folds that into a
// message of its own, and ff into one that names the environment variable
// in words. It also remembers where each value that was set came from
// (at: the source of the Sets being made now), for the messages of
// Validate.
type setRecorder struct {
	fs       *flag.FlagSet
	orig     map[string]flag.Value
	at       origin
	origins  map[string]origin
	failed   *SettingError
	restored bool
}

func recordSets(fs *flag.FlagSet) *setRecorder {
	r := &setRecorder{fs: fs, orig: map[string]flag.Value{}, origins: map[string]origin{}}
	fs.VisitAll(func(f *flag.Flag) {
		r.orig[f.Name] = f.Value
		rv := &recordingValue{Value: f.Value, name: f.Name, r: r}
		if isBoolValue(f.Value) {
			f.Value = recordingBool{rv}
		} else {
			f.Value = rv
		}
	})
	return r
}

// restore puts the original values back (for usage output); idempotent.
func (r *setRecorder) restore() {
	if r.restored {
		return
	}
	r.restored = true
	r.fs.VisitAll(func(f *flag.Flag) {
		if v, ok := r.orig[f.Name]; ok {
			f.Value = v
		}
	})
}

// parseArgs runs fs.Parse silently and turns its error into one of ours.
func (r *setRecorder) parseArgs(args []string) error {
	fs := r.fs
	out, usage := fs.Output(), fs.Usage
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	defer func() { fs.SetOutput(out); fs.Usage = usage }()
	r.at, r.failed = origin{source: FromFlag}, nil
	err := fs.Parse(args)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		return flag.ErrHelp
	case r.failed != nil:
		return r.failed
	}
	// The flag package's own wording for the other mistakes, unchanged since Go 1.
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		var names []string
		fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
		return &UnknownFlagError{Name: name, Suggestions: suggest(name, names)}
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		if f := fs.Lookup(name); f != nil {
			return &SettingError{Setting: name, Source: FromFlag,
				Problem: fmt.Sprintf("needs a value, e.g. --%s %s", name, r.example(f))}
		}
	}
	if arg, ok := strings.CutPrefix(msg, "bad flag syntax: "); ok {
		return fmt.Errorf("bad flag syntax %q: write --name value or --name=value", arg)
	}
	return err
}

// example is a value flag f accepts: its default, unless that is empty or
// zero, else an example of its kind.
func (r *setRecorder) example(f *flag.Flag) string {
	v := r.orig[f.Name]
	switch f.DefValue {
	case "", "0", "0s":
		if e, ok := v.(interface{ Example() string }); ok {
			return e.Example()
		}
	default:
		return f.DefValue
	}
	name, _ := flag.UnquoteUsage(&flag.Flag{Name: f.Name, Usage: f.Usage, Value: v})
	if name == "" {
		name = "VALUE"
	}
	return name
}

// underlying is the value a recording wrapper stands for.
func underlying(v flag.Value) flag.Value {
	switch w := v.(type) {
	case *recordingValue:
		return w.Value
	case recordingBool:
		return w.Value
	}
	return v
}

type recordingValue struct {
	flag.Value
	name string
	r    *setRecorder
}

func (v *recordingValue) Set(s string) error {
	err := v.Value.Set(s)
	switch {
	case err == nil:
		v.r.origins[v.name] = v.r.at
	case v.r.failed == nil:
		at := v.r.at
		v.r.failed = &SettingError{Setting: v.name, Problem: problemOf(v.Value, s, err), Source: at.source, File: at.file, Line: at.line}
	}
	return err
}

type recordingBool struct{ *recordingValue }

func (recordingBool) IsBoolFlag() bool { return true }

func isBoolValue(v flag.Value) bool {
	b, ok := underlying(v).(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// problemOf words a failed Set of value s: our values say it themselves;
// for the flag package's own kinds the kind tells.
func problemOf(v flag.Value, s string, err error) string {
	var ve *valueError
	if errors.As(err, &ve) {
		return ve.msg
	}
	if g, ok := underlying(v).(flag.Getter); ok {
		switch g.Get().(type) {
		case bool:
			return fmt.Sprintf("%q is not true or false", s)
		case int, int64, uint, uint64:
			if err.Error() == "value out of range" {
				return fmt.Sprintf("%q is out of range", s)
			}
			return fmt.Sprintf("%q is not a whole number (e.g. 1000)", s)
		case float64:
			return fmt.Sprintf("%q is not a number (e.g. 0.5)", s)
		case time.Duration:
			return fmt.Sprintf("%q is not a duration (e.g. 30s, 5m or 1h)", s)
		}
	}
	return fmt.Sprintf("%q: %v", s, err)
}
