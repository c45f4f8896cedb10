package config

import (
	"slices"
	"strings"
)

// suggest returns the candidates closest to a misspelt name, for "did you
// mean": those at the smallest edit distance (insertions, deletions,
// substitutions and swaps of neighbours) if it is small for the name's
// length, at most three. Case is ignored and '_' and '.' read as '-', so
// checkpoint_url finds checkpoint-url. A name that starts a candidate
// (batch for batch-size) counts as one edit away, one that ends with a
// candidate after a dash (dedup-key for key) as two.
func suggest(name string, candidates []string) []string {
	n := normalizeName(name)
	if n == "" {
		return nil
	}
	limit := max(1, min(3, len(n)/3))
	best := limit + 1
	var out []string
	for _, c := range candidates {
		d := editDistance(n, normalizeName(c))
		if len(n) >= 3 && strings.HasPrefix(normalizeName(c), n) {
			d = min(d, 1)
		}
		if strings.HasSuffix(n, "-"+normalizeName(c)) {
			d = min(d, 2) // a qualified name: dedup-key for key (a prefix, max-key for max-key-bytes, is nearer)
		}
		switch {
		case d < best:
			best, out = d, []string{c}
		case d == best:
			out = append(out, c)
		}
	}
	slices.Sort(out)
	if len(out) > 3 {
		out = out[:3]
	}
	return out
}

func normalizeName(s string) string {
	s = strings.TrimLeft(strings.TrimSpace(s), "-")
	return strings.NewReplacer("_", "-", ".", "-").Replace(strings.ToLower(s))
}

// editDistance is the optimal string alignment distance of a and b, over
// bytes (setting names are ASCII).
func editDistance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

// didYouMean phrases suggestions: "; did you mean --window?" with prefix
// "--", or "" when there are none.
func didYouMean(prefix string, names []string) string {
	if len(names) == 0 {
		return ""
	}
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = prefix + n
	}
	switch len(q) {
	case 1:
		return "; did you mean " + q[0] + "?"
	case 2:
		return "; did you mean " + q[0] + " or " + q[1] + "?"
	}
	return "; did you mean " + strings.Join(q[:len(q)-1], ", ") + " or " + q[len(q)-1] + "?"
}
