package config

import (
	"bytes"
	"flag"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	cases := []struct {
		in   string
		want time.Duration
		err  string // the exact message; "" when in is accepted
	}{
		{in: "0", want: 0},
		{in: "0s", want: 0},
		{in: "90s", want: 90 * time.Second},
		{in: "1h30m", want: 90 * time.Minute},
		{in: "24h", want: day},
		{in: "7d", want: 7 * day},
		{in: "2w", want: 2 * week},
		{in: "1d12h", want: 36 * time.Hour},
		{in: "1.5d", want: 36 * time.Hour},
		{in: ".5h", want: 30 * time.Minute},
		{in: "3D", want: 3 * day},
		{in: "2W", want: 2 * week},
		{in: "12H", want: 12 * time.Hour},
		{in: "30S", want: 30 * time.Second},
		{in: "500MS", want: 500 * time.Millisecond},
		{in: "1w2d3h4m5s6ms7us8ns", want: week + 2*day + 3*time.Hour + 4*time.Minute + 5*time.Second + 6*time.Millisecond + 7*time.Microsecond + 8},
		{in: "1µs", want: time.Microsecond},
		{in: " 1d 12h ", want: 36 * time.Hour},
		{in: "10 m", want: 10 * time.Minute},
		{in: "-1h", want: -time.Hour},
		{in: "+2h", want: 2 * time.Hour},
		{in: "1.0000000001s", want: time.Second}, // fractions of a nanosecond are dropped, as Go does
		{in: "106751d", want: 106751 * day},

		{in: "", err: `empty duration: use e.g. 90s, 15m, 36h, 7d or 1d12h`},
		{in: "7x", err: `"7x": unknown unit "x"; use ns, us, ms, s, m, h, d or w, e.g. 90s, 15m, 36h, 7d or 1d12h`},
		{in: "3M", err: `"3M": M could mean minutes or months; write m for minutes, or days for months (e.g. 30d)`},
		{in: "30", err: `"30" has no unit: write e.g. 30s, 30m, 30h or 30d`},
		{in: "1.5", err: `"1.5" has no unit: write e.g. 1.5s, 1.5m, 1.5h or 1.5d`},
		{in: "day", err: `"day" is not a duration: use e.g. 90s, 15m, 36h, 7d or 1d12h`},
		{in: "1d-2h", err: `"1d-2h" is not a duration: use e.g. 90s, 15m, 36h, 7d or 1d12h`},
		{in: "1e3s", err: `"1e3s": unknown unit "e"; use ns, us, ms, s, m, h, d or w, e.g. 90s, 15m, 36h, 7d or 1d12h`},
		{in: "106752d", err: `"106752d" is too long: at most 106751d (about 292 years)`},
		{in: "1dd", err: `"1dd": unknown unit "dd"; use ns, us, ms, s, m, h, d or w, e.g. 90s, 15m, 36h, 7d or 1d12h`},
	}
	for _, tc := range cases {
		got, err := ParseDuration(tc.in)
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		case tc.err != "" && (err == nil || err.Error() != tc.err):
			t.Errorf("ParseDuration(%q) error\n got %v\nwant %s", tc.in, err, tc.err)
		}
	}
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                                        "0s",
		5 * time.Millisecond:                     "5ms",
		1500 * time.Millisecond:                  "1.5s",
		90 * time.Second:                         "1m30s",
		time.Minute:                              "1m",
		time.Hour + 30*time.Second:               "1h30s",
		day:                                      "24h",
		36 * time.Hour:                           "36h",
		47*time.Hour + 59*time.Minute:            "47h59m",
		2 * day:                                  "2d",
		3 * day:                                  "3d",
		2*week + 12*time.Hour:                    "14d12h",
		-90 * time.Minute:                        "-1h30m",
		time.Duration(math.MinInt64):             "-106751d23h47m16.854775808s",
		math.MaxInt64 / time.Duration(day) * day: "106751d",
	} {
		if got := FormatDuration(d); got != want {
			t.Errorf("FormatDuration(%d) = %q, want %q", int64(d), got, want)
		}
		if back, err := ParseDuration(FormatDuration(d)); err != nil || back != d {
			t.Errorf("ParseDuration(FormatDuration(%d)) = %d, %v", int64(d), int64(back), err)
		}
	}
}

func TestParseCount(t *testing.T) {
	cases := []struct {
		in   string
		want uint64
		err  string
	}{
		{in: "0", want: 0},
		{in: "10000000", want: 1e7},
		{in: "10_000_000", want: 1e7},
		{in: "1e7", want: 1e7},
		{in: "1E7", want: 1e7},
		{in: "2.5k", want: 2500},
		{in: "2.5K", want: 2500},
		{in: "50m", want: 50e6},
		{in: "50M", want: 50e6},
		{in: "3g", want: 3e9},
		{in: "3b", want: 3e9},
		{in: "3B", want: 3e9},
		{in: "1t", want: 1e12},
		{in: "1.5T", want: 1.5e12},
		{in: "10 M", want: 1e7},
		{in: "2.3k", want: 2300}, // exact, no float rounding
		{in: "18446744073709551615", want: math.MaxUint64},

		{in: "", err: `"" is not a count: use e.g. 10000000, 10_000_000, 10M, 2.5k or 1e7`},
		{in: "ten", err: `"ten" is not a count: use e.g. 10000000, 10_000_000, 10M, 2.5k or 1e7`},
		{in: "-1", err: `"-1" is negative: a count is 0 or more, e.g. 10000000, 10_000_000, 10M, 2.5k or 1e7`},
		{in: "1.5", err: `"1.5" is not a whole count: use a whole number, e.g. 2, 1500 or 1.5k`},
		{in: "1.2345k", err: `"1.2345k" is not a whole count: use a whole number, e.g. 2, 1500 or 1.5k`},
		{in: "10Q", err: `"10Q": unknown suffix "Q"; use k, m, g or b, t (thousand, million, billion, trillion), e.g. 10000000, 10_000_000, 10M, 2.5k or 1e7`},
		{in: "10mb", err: `"10mb": unknown suffix "mb"; use k, m, g or b, t (thousand, million, billion, trillion), e.g. 10000000, 10_000_000, 10M, 2.5k or 1e7`},
		{in: "_10", err: `"_10" is not a count: underscores go between digits, e.g. 10000000, 10_000_000, 10M, 2.5k or 1e7`},
		{in: "1e30", err: `"1e30" is too large: at most 18446744073709551615`},
		{in: "18446744073709551616", err: `"18446744073709551616" is too large: at most 18446744073709551615`},
	}
	for _, tc := range cases {
		got, err := ParseCount(tc.in)
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("ParseCount(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		case tc.err != "" && (err == nil || err.Error() != tc.err):
			t.Errorf("ParseCount(%q) error\n got %v\nwant %s", tc.in, err, tc.err)
		}
	}
	if _, err := parseCount("3G", math.MaxInt32); err == nil || err.Error() != `"3G" is too large: at most 2147483647` {
		t.Errorf("count above the limit of its setting: %v", err)
	}
}

func TestFormatCount(t *testing.T) {
	for n, want := range map[uint64]string{0: "0", 999: "999", 2000: "2k", 2500: "2500", 10_000_000: "10M", 2_500_000: "2500k", 1e9: "1G", 3e12: "3T"} {
		if got := FormatCount(n); got != want {
			t.Errorf("FormatCount(%d) = %q, want %q", n, got, want)
		}
		if back, err := ParseCount(FormatCount(n)); err != nil || back != n {
			t.Errorf("ParseCount(FormatCount(%d)) = %d, %v", n, back, err)
		}
	}
}

func TestParseRate(t *testing.T) {
	cases := []struct {
		in   string
		want float64
		err  string
	}{
		{in: "0.01", want: 0.01},
		{in: ".01", want: 0.01},
		{in: "1e-4", want: 1e-4},
		{in: "1%", want: 0.01},
		{in: "0.1 %", want: 0.001},
		{in: " 5 % ", want: 0.05},
		{in: "150%", want: 1.5}, // the range is Validate's business
		{in: "-0.1", want: -0.1},

		{in: "", err: `"" is not a rate: use a fraction or a percentage, e.g. 0.01 or 1%`},
		{in: "%", err: `"%" is not a rate: use a fraction or a percentage, e.g. 0.01 or 1%`},
		{in: "one percent", err: `"one percent" is not a rate: use a fraction or a percentage, e.g. 0.01 or 1%`},
		{in: "1%%", err: `"1%%" is not a rate: use a fraction or a percentage, e.g. 0.01 or 1%`},
		{in: "NaN", err: `"NaN" is not a rate: use a fraction or a percentage, e.g. 0.01 or 1%`},
		{in: "Inf", err: `"Inf" is not a rate: use a fraction or a percentage, e.g. 0.01 or 1%`},
		{in: "0x1p-2", err: `"0x1p-2" is not a rate: use a fraction or a percentage, e.g. 0.01 or 1%`},
	}
	for _, tc := range cases {
		got, err := ParseRate(tc.in)
		switch {
		case tc.err == "" && (err != nil || math.Abs(got-tc.want) > 1e-15):
			t.Errorf("ParseRate(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		case tc.err != "" && (err == nil || err.Error() != tc.err):
			t.Errorf("ParseRate(%q) error\n got %v\nwant %s", tc.in, err, tc.err)
		}
	}
}

func TestParseByteSize(t *testing.T) {
	cases := []struct {
		in   string
		want uint64
		err  string
	}{
		{in: "1048576", want: 1 << 20},
		{in: "1_048_576", want: 1 << 20},
		{in: "1MiB", want: 1 << 20},
		{in: "1mib", want: 1 << 20},
		{in: "1 MiB", want: 1 << 20},
		{in: "1MB", want: 1e6},
		{in: "1mb", want: 1e6},
		{in: "4KiB", want: 4096},
		{in: "4kB", want: 4000},
		{in: "1.5KiB", want: 1536},
		{in: "2GiB", want: 2 << 30},
		{in: "512B", want: 512},

		{in: "1M", err: `"1M" is ambiguous: write 1MiB (powers of 1024) or 1MB (powers of 1000)`},
		{in: "4k", err: `"4k" is ambiguous: write 4KiB (powers of 1024) or 4kB (powers of 1000)`},
		{in: "1x", err: `"1x": unknown unit "x"; use B, kB, MB, GB or KiB, MiB, GiB, e.g. 1048576, 1MiB or 1MB`},
		{in: "big", err: `"big" is not a byte size: use e.g. 1048576, 1MiB or 1MB`},
		{in: "-1MiB", err: `"-1MiB" is negative: use e.g. 1048576, 1MiB or 1MB`},
		{in: "1.5B", err: `"1.5B" is not a whole number of bytes: use e.g. 1048576, 1MiB or 1MB`},
		{in: "1e6", err: `"1e6": unknown unit "e6"; use B, kB, MB, GB or KiB, MiB, GiB, e.g. 1048576, 1MiB or 1MB`},
	}
	for _, tc := range cases {
		got, err := ParseByteSize(tc.in)
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		case tc.err != "" && (err == nil || err.Error() != tc.err):
			t.Errorf("ParseByteSize(%q) error\n got %v\nwant %s", tc.in, err, tc.err)
		}
	}
	for n, want := range map[uint64]string{0: "0", 1 << 20: "1MiB", 4096: "4KiB", 1e6: "1MB", 1000: "1kB", 1500: "1500", 3 << 40: "3TiB"} {
		if got := FormatByteSize(n); got != want {
			t.Errorf("FormatByteSize(%d) = %q, want %q", n, got, want)
		}
		if back, err := ParseByteSize(FormatByteSize(n)); err != nil || back != n {
			t.Errorf("ParseByteSize(FormatByteSize(%d)) = %d, %v", n, back, err)
		}
	}
}

// FuzzParseUnits: the parsers never panic, and what they accept the
// formatters write back so that it parses to the same value.
func FuzzParseUnits(f *testing.F) {
	for _, s := range []string{"7d", "1d12h", "1.5D", "3M", "10_000_000", "2.5k", "1e999", "1%", "0.1 %", "1MiB", "1M", "-0", ".", "1e", "µs"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if d, err := ParseDuration(s); err == nil {
			if back, err := ParseDuration(FormatDuration(d)); err != nil || back != d {
				t.Fatalf("duration %q = %d: written %q, read back %d, %v", s, int64(d), FormatDuration(d), int64(back), err)
			}
		}
		if n, err := ParseCount(s); err == nil {
			if back, err := ParseCount(FormatCount(n)); err != nil || back != n {
				t.Fatalf("count %q = %d: written %q, read back %d, %v", s, n, FormatCount(n), back, err)
			}
		}
		if n, err := ParseByteSize(s); err == nil {
			if back, err := ParseByteSize(FormatByteSize(n)); err != nil || back != n {
				t.Fatalf("size %q = %d: written %q, read back %d, %v", s, n, FormatByteSize(n), back, err)
			}
		}
		if r, err := ParseRate(s); err == nil {
			if back, err := ParseRate(FormatRate(r)); err != nil || back != r {
				t.Fatalf("rate %q = %v: written %q, read back %v, %v", s, r, FormatRate(r), back, err)
			}
		}
	})
}

// TestUnitsInEverySource: every duration setting takes days and weeks,
// every count setting suffixes, from a flag, the environment and the file.
func TestUnitsInEverySource(t *testing.T) {
	def := Default()
	fs := def.FlagSet("run")
	kinds := map[string][]string{} // kind → flag names
	fs.VisitAll(func(f *flag.Flag) {
		if k, ok := f.Value.(interface{ Kind() string }); ok {
			kinds[k.Kind()] = append(kinds[k.Kind()], f.Name)
		}
	})
	for _, want := range []struct {
		kind, in, out string
	}{
		{"duration", "1d12h", "36h"}, {"duration", "1.5D", "36h"}, {"duration", "2w", "14d"},
		{"count", "2.5k", "2500"}, {"count", "3_000", "3k"},
		{"size", "2KiB", "2KiB"},
		{"rate", "5%", "0.05"},
	} {
		if len(kinds[want.kind]) == 0 {
			t.Fatalf("no %s settings", want.kind)
		}
		for _, name := range kinds[want.kind] {
			check := func(how string, cfg *Run, err error) {
				t.Helper()
				if err != nil {
					t.Errorf("%s %s %q: %v", how, name, want.in, err)
					return
				}
				if got := cfg.FlagSet("check").Lookup(name).Value.String(); got != want.out {
					t.Errorf("%s %s %q = %s, want %s", how, name, want.in, got, want.out)
				}
			}
			cfg, err := Parse(append(append([]string{}, minimal...), "--"+name, want.in), &bytes.Buffer{})
			check("flag", cfg, err)

			t.Setenv(LookupEnvName(name), want.in)
			cfg, err = Parse(minimal, &bytes.Buffer{})
			check("env", cfg, err)
			os.Unsetenv(LookupEnvName(name))

			file := filepath.Join(t.TempDir(), "c.yaml")
			if err := os.WriteFile(file, []byte(name+": "+want.in+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg, err = Parse(append(append([]string{}, minimal...), "--config", file), &bytes.Buffer{})
			check("file", cfg, err)
		}
	}
}
