package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"gopkg.in/yaml.v3"
)

// yamlParser reads the config file for ff.Parse. It hands every scalar to
// the flag as written in the file: YAML's type guessing never applies, so
// `output: no`, `group: on` or `capacity: 1e7` mean the text they show (the
// YAML 1.1 parser of ffyaml turns y/n/on/off into booleans). Nested maps
// join their keys with "-" (tls: {ca-file: x} sets tls-ca-file); a list sets
// a flag once per element; an empty value sets the empty string. Unknown keys
// are errors naming the line.
func yamlParser(fs *flag.FlagSet) func(r io.Reader, set func(name, value string) error) error {
	return func(r io.Reader, set func(name, value string) error) error {
		var doc yaml.Node
		if err := yaml.NewDecoder(r).Decode(&doc); err != nil {
			if errors.Is(err, io.EOF) {
				return nil // empty file
			}
			return fmt.Errorf("parsing YAML config: %w", err)
		}
		if len(doc.Content) == 0 {
			return nil
		}
		root := doc.Content[0]
		if root.Kind != yaml.MappingNode {
			return fmt.Errorf("YAML config line %d: want a map of settings (name: value)", root.Line)
		}
		return walkYAML(fs, "", root, set)
	}
}

func walkYAML(fs *flag.FlagSet, prefix string, m *yaml.Node, set func(name, value string) error) error {
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		name := k.Value
		if prefix != "" {
			name = prefix + "-" + name
		}
		if v.Kind == yaml.AliasNode {
			v = v.Alias
		}
		switch v.Kind {
		case yaml.MappingNode:
			if err := walkYAML(fs, name, v, set); err != nil {
				return err
			}
			continue
		}
		if fs.Lookup(name) == nil {
			return fmt.Errorf("YAML config line %d: unknown setting %q (see bloomgate run --help)", k.Line, name)
		}
		switch v.Kind {
		case yaml.ScalarNode:
			val := v.Value
			if v.Tag == "!!null" {
				val = ""
			}
			if isBoolFlag(fs.Lookup(name)) {
				val = yamlBool(val)
			}
			if err := set(name, val); err != nil {
				return fmt.Errorf("YAML config line %d: %w", v.Line, err)
			}
		case yaml.SequenceNode:
			for _, e := range v.Content {
				if e.Kind != yaml.ScalarNode {
					return fmt.Errorf("YAML config line %d: %s: want a list of plain values", e.Line, name)
				}
				if err := set(name, e.Value); err != nil {
					return fmt.Errorf("YAML config line %d: %w", e.Line, err)
				}
			}
		default:
			return fmt.Errorf("YAML config line %d: %s: unsupported value", v.Line, name)
		}
	}
	return nil
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
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
