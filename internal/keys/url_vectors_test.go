package keys

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// vectorDir holds equivalent-URL pairs from published test suites of
// crawler and browser projects, one file per source (its header names it),
// and differences.txt, the pairs the documented rules treat differently on
// purpose.
const vectorDir = "testdata/urlequiv"

type urlPair struct{ a, b string }

// unquoteFields reads the Go-quoted strings at the start of line and
// returns them and the rest of the line.
func unquoteFields(line string, n int) ([]string, string, error) {
	var fields []string
	for range n {
		line = strings.TrimLeft(line, " \t")
		q, err := strconv.QuotedPrefix(line)
		if err != nil {
			return nil, "", fmt.Errorf("quoted string expected at %q: %w", line, err)
		}
		s, err := strconv.Unquote(q)
		if err != nil {
			return nil, "", err
		}
		fields = append(fields, s)
		line = line[len(q):]
	}
	return fields, strings.TrimSpace(line), nil
}

// readVectorLines calls fn with every line of the file that is not blank
// or a comment, and its line number.
func readVectorLines(t *testing.T, name string, fn func(line string, n int) error) {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := fn(line, n); err != nil {
			t.Fatalf("%s:%d: %v", name, n, err)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}

func readPairs(t *testing.T, name string) []urlPair {
	var pairs []urlPair
	readVectorLines(t, name, func(line string, _ int) error {
		f, rest, err := unquoteFields(line, 2)
		if err != nil {
			return err
		}
		if rest != "" {
			return fmt.Errorf("text after the pair: %q", rest)
		}
		pairs = append(pairs, urlPair{f[0], f[1]})
		return nil
	})
	return pairs
}

// documentedDifference is a published pair that is not one key here, and
// why.
type documentedDifference struct {
	reason string
	seen   bool
}

func readDifferences(t *testing.T) map[string]map[urlPair]*documentedDifference {
	name := filepath.Join(vectorDir, "differences.txt")
	reasons := map[string]string{}
	diffs := map[string]map[urlPair]*documentedDifference{}
	readVectorLines(t, name, func(line string, _ int) error {
		if tag, text, ok := strings.Cut(line, " "); ok && tag == "reason" {
			tag, text, _ = strings.Cut(text, " ")
			reasons[tag] = text
			return nil
		}
		source, rest, ok := strings.Cut(line, " ")
		if !ok {
			return fmt.Errorf("source file name expected")
		}
		f, tag, err := unquoteFields(rest, 2)
		if err != nil {
			return err
		}
		if reasons[tag] == "" {
			return fmt.Errorf("unknown reason %q (reasons are defined before they are used)", tag)
		}
		if diffs[source] == nil {
			diffs[source] = map[urlPair]*documentedDifference{}
		}
		diffs[source][urlPair{f[0], f[1]}] = &documentedDifference{reason: tag + ": " + reasons[tag]}
		return nil
	})
	return diffs
}

// TestNormalizeURLPublishedVectors: every published pair is one key unless
// differences.txt says why not; a listed difference that has become one
// key fails too, so the list stays true.
func TestNormalizeURLPublishedVectors(t *testing.T) {
	diffs := readDifferences(t)
	files, err := filepath.Glob(filepath.Join(vectorDir, "*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var total, passed, documented int
	for _, file := range files {
		source := filepath.Base(file)
		if source == "differences.txt" {
			continue
		}
		pairs := readPairs(t, file)
		if len(pairs) == 0 {
			t.Errorf("%s: no pairs", source)
		}
		var ok, known int
		for _, p := range pairs {
			a, errA := NormalizeURL(nil, p.a)
			b, errB := NormalizeURL(nil, p.b)
			same := errA == nil && errB == nil && string(a) == string(b)
			d := diffs[source][p]
			switch {
			case d != nil && same:
				t.Errorf("%s: %q and %q are now one key %q; remove them from differences.txt", source, p.a, p.b, a)
				d.seen = true
			case d != nil:
				d.seen = true
				known++
			case same:
				ok++
			default:
				t.Errorf("%s: %q and %q are not one key:\n\t%q, %v\n\t%q, %v", source, p.a, p.b, a, errA, b, errB)
			}
		}
		t.Logf("%-22s %3d of %3d pairs one key, %3d documented differences", source, ok, len(pairs), known)
		total += len(pairs)
		passed += ok
		documented += known
	}
	t.Logf("%-22s %3d of %3d pairs one key, %3d documented differences", "all sources", passed, total, documented)
	for source, m := range diffs {
		for p, d := range m {
			if !d.seen {
				t.Errorf("differences.txt: %s %q %q is not a pair of that source", source, p.a, p.b)
			}
		}
	}
}
