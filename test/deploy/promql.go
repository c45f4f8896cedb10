package deploy

import (
	"regexp"
	"sort"
	"strings"
)

// metricIdent matches identifiers in a PromQL expression that name
// bloomgate's metrics or the standard Go/process collectors' series.
var metricIdent = regexp.MustCompile(`\b(?:bloomgate|go|process)_[a-zA-Z0-9_:]*\b|\bup\b`)

// quoted strips "…" and '…' strings (label values, regexes), so that a label
// matcher like job=~".*bloomgate.*" is not read as a metric name.
var quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)

// MetricNames returns the distinct metric names an expression refers to.
func MetricNames(expr string) []string {
	seen := map[string]bool{}
	for _, m := range metricIdent.FindAllString(quoted.ReplaceAllString(expr, `""`), -1) {
		seen[m] = true
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Balanced reports whether (), [] and {} nest properly outside strings: a
// cheap syntax check where no PromQL parser is at hand.
func Balanced(expr string) bool {
	var stack []rune
	pair := map[rune]rune{')': '(', ']': '[', '}': '{'}
	for _, r := range quoted.ReplaceAllString(expr, `""`) {
		switch r {
		case '(', '[', '{':
			stack = append(stack, r)
		case ')', ']', '}':
			if len(stack) == 0 || stack[len(stack)-1] != pair[r] {
				return false
			}
			stack = stack[:len(stack)-1]
		}
	}
	return len(stack) == 0
}

// Exported reports whether name is served, given the families of a scrape
// (name → TYPE): histogram and summary series carry _bucket, _sum and
// _count suffixes; `up` is made by Prometheus itself.
func Exported(name string, families map[string]string) bool {
	if name == "up" {
		return true
	}
	if _, ok := families[name]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if !ok {
			continue
		}
		switch families[base] {
		case "histogram":
			return true
		case "summary":
			if suffix != "_bucket" {
				return true
			}
		}
	}
	return false
}

// Families parses the # TYPE lines of a Prometheus text exposition.
func Families(exposition string) map[string]string {
	fams := map[string]string{}
	for _, line := range strings.Split(exposition, "\n") {
		f := strings.Fields(line)
		if len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			fams[f[2]] = f[3]
		}
	}
	return fams
}
