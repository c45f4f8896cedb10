package config

import (
	"slices"
	"testing"
)

func TestSuggest(t *testing.T) {
	var names []string
	for _, s := range settings {
		names = append(names, s.name)
	}
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"windw", []string{"window"}},
		{"widnow", []string{"window"}},   // swapped neighbours
		{"windows", []string{"window"}},  // one too many
		{"Window", []string{"window"}},   // case
		{"--window", []string{"window"}}, // dashes
		{"checkpoint_url", []string{"checkpoint-url"}},
		{"dedup-key", []string{"key"}}, // qualified: not seed-key
		{"tls.ca-file", []string{"tls-ca-file"}},
		{"capcity", []string{"capacity"}},
		{"batch", []string{"batch-size", "batch-timeout"}}, // a prefix
		{"session-timout", []string{"session-timeout"}},
		{"kye", []string{"key"}},
		{"max-key", []string{"max-key-bytes"}},
		{"frobnicate", nil},
		{"x", nil},
		{"", nil},
	} {
		if got := suggest(tc.in, names); !slices.Equal(got, tc.want) {
			t.Errorf("suggest(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"a", "", 1}, {"", "abc", 3}, {"window", "window", 0},
		{"windw", "window", 1}, {"widnow", "window", 1}, {"kitten", "sitting", 3}, {"ab", "ba", 1},
	} {
		if got := editDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestDidYouMean(t *testing.T) {
	for _, tc := range []struct {
		names []string
		want  string
	}{
		{nil, ""},
		{[]string{"window"}, "; did you mean --window?"},
		{[]string{"a", "b"}, "; did you mean --a or --b?"},
		{[]string{"a", "b", "c"}, "; did you mean --a, --b or --c?"},
	} {
		if got := didYouMean("--", tc.names); got != tc.want {
			t.Errorf("didYouMean(%q) = %q, want %q", tc.names, got, tc.want)
		}
	}
}
