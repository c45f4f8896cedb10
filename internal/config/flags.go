package config

import (
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteUsage writes the help of `bloomgate run`: every flag with its
// default and its environment variable, grouped by concern.
func WriteUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, `Usage: bloomgate run [flags]

Reads the input topic with a consumer group, drops events whose key was seen
within the window, forwards the rest to the output topic.

Settings come from a YAML file (--config), environment variables and flags,
in rising precedence. Each flag --name has the environment variable
%s_NAME (upper case, '-' becomes '_'); YAML keys are the flag names.

Values:
  duration   a number and a unit, combined and with fractions: 90s, 15m, 36h,
             7d, 2w, 1.5d, 1d12h. Units ns, us, ms, s, m, h, d (24h), w (7d),
             in any case, except M: write m for minutes, days for months.
  count      10000000, 10_000_000, 1e7, or a suffix in any case: k (thousand),
             m (million), g or b (billion), t (trillion): 10M, 2.5k.
  rate       a fraction or a percentage: 0.01, 1%%, 0.1 %%.
  size       bytes: 1048576, or with B, kB, MB, GB (powers of 1000) or KiB,
             MiB, GiB (powers of 1024): 1MiB = 1048576, 1MB = 1000000.

`, EnvPrefix)
	WriteSettings(w, fs)
}

// WriteSettings writes every setting of fs with its default and its
// environment variable, grouped by concern (the body of WriteUsage).
func WriteSettings(w io.Writer, fs *flag.FlagSet) {
	for _, title := range sectionOrder {
		fmt.Fprintf(w, "%s:\n", title)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, s := range settings {
			if f := fs.Lookup(s.name); f != nil && s.section == title {
				writeFlag(tw, f)
			}
		}
		tw.Flush()
		fmt.Fprintln(w)
	}
}

func writeFlag(tw io.Writer, f *flag.Flag) {
	kind, usage := flag.UnquoteUsage(f)
	if k, ok := f.Value.(interface{ Kind() string }); ok && kind == "value" {
		kind = k.Kind()
	}
	def := f.DefValue
	if def == "" {
		def = `""`
	}
	if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		fmt.Fprintf(tw, "  --%s\t%s\n", f.Name, usage)
	} else {
		fmt.Fprintf(tw, "  --%s %s\t%s\n", f.Name, kind, usage)
	}
	fmt.Fprintf(tw, "  \tdefault %s, env %s\n", def, envName(f.Name))
}
