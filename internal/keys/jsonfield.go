package keys

import (
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

// This file reads a json: part's field so that it means one thing. gjson
// stops at the first member of a name, while Go's encoding/json and
// JavaScript's JSON.parse keep the last: keyed by the first, a record
// {"id":"X1","id":"Y1"} would be a duplicate of the record Y1 that every
// consumer downstream sees twice, and X1 would never be seen. So an
// object on the path that holds the path's member twice is bad input
// (ReasonDuplicateKeyField), whatever the values; objects off the path, and
// members of other names, do not change the key and are not looked at.

// pathStep is one level of a json: path: the member name that selects a
// field of an object there, or the index that selects an element of an
// array.
type pathStep struct {
	name string // path escapes removed, as gjson compares it
	// quoted is the name as a member spelled without escapes appears in a
	// document; rare is the index of its byte searched first.
	quoted string
	rare   int
	// index is the array element the step selects, -1 if none (gjson
	// reads an index only from unescaped digits).
	index int
	// named is how many steps of the path, this one included, are
	// certainly object members of this name: a member the path follows
	// appears in the document once per such step, so more occurrences of
	// quoted may be a second member. A step of digits can be an array
	// index instead and is not counted.
	named int
}

// parsePath splits a plain dotted path as gjson does for one (a `\` takes
// the next character literally; a trailing one is dropped). parseSpec has
// refused the syntax that makes gjson compute a value instead of reading a
// field.
func parsePath(path string) []pathStep {
	var steps []pathStep
	name, escaped := make([]byte, 0, len(path)), false
	end := func() {
		st := pathStep{name: string(name), index: -1}
		if !escaped {
			st.index = arrayIndex(st.name)
		}
		st.quoted = `"` + st.name + `"`
		for i := 1; i < len(st.quoted)-1; i++ {
			if st.rare == 0 || commonness(st.quoted[i]) < commonness(st.quoted[st.rare]) {
				st.rare = i
			}
		}
		steps = append(steps, st)
		name, escaped = name[:0], false
	}
	for i := 0; i < len(path); i++ {
		switch c := path[i]; c {
		case '\\':
			escaped = true
			if i+1 < len(path) {
				i++
				name = append(name, path[i])
			}
		case '.':
			end()
		default:
			name = append(name, c)
		}
	}
	end()
	for i := range steps {
		for _, o := range steps {
			if o.name == steps[i].name && o.index < 0 {
				steps[i].named++
			}
		}
	}
	return steps
}

// commonness ranks a byte by how often it occurs in JSON text, a guess
// that only speed depends on: structure, digits, then lower-case letters
// in English order are common; upper-case letters, '_' and the rest rare.
func commonness(c byte) int {
	const common = `":, {}[]0123456789-./etaoinsrhldcumfpgwybvkxjqz`
	if i := strings.IndexByte(common, c); i >= 0 {
		return len(common) - i
	}
	return 0
}

// arrayIndex is the array index gjson reads from a path step: decimal
// digits only, -1 if it reads none.
func arrayIndex(s string) int {
	if s == "" || len(s) > 18 {
		return -1
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return -1
		}
		n = n*10 + int(s[i]-'0')
	}
	return n
}

// computedPath reports why gjson would compute a value for path instead of
// reading a field of the document, "" if it reads a field.
func computedPath(path string) string {
	switch {
	case strings.HasPrefix(path, ".."):
		return "a leading .. reads the value as JSON lines"
	case path[0] == '!':
		return "a leading ! is a literal, one key for every record"
	case path[0] == '[' || path[0] == '{':
		return "a leading [ or { builds a new array or object"
	case strings.Contains(path, ".[") || strings.Contains(path, ".{"):
		return "a .[ or .{ builds a new array or object"
	}
	return ""
}

// jsonField returns the key text of the part's field in doc, or a reason.
// Strings yield their unescaped text, numbers and booleans their raw text.
func jsonField(doc string, p *part) (string, string) {
	r := gjson.Get(doc, p.name)
	var raw, reason string
	switch r.Type {
	case gjson.String:
		switch {
		case strings.IndexByte(r.Raw, '\\') >= 0 && hasLoneSurrogate(r.Raw):
			reason = ReasonMalformedJSON
		case r.Str == "":
			reason = ReasonEmpty
		default:
			raw = r.Str
		}
	case gjson.Number, gjson.True, gjson.False:
		raw = r.Raw
	case gjson.Null:
		if r.Raw == "" {
			// Absent. gjson tries every member of the name on the way, so
			// no reading of a duplicate would find the field either.
			return "", ReasonMissing
		}
		reason = ReasonEmpty
	default: // gjson.JSON: an object or an array
		reason = ReasonUnsupportedType
	}
	// A duplicate decides before what was found: which value is meant is
	// open, so neither "empty" nor "unsupported" describes the record.
	if r := pathReason(doc, p.steps); r != "" {
		return "", r
	}
	return raw, reason
}

// pathReason reports ReasonDuplicateKeyField if an object on the path
// holds the path's member twice, ReasonMalformedJSON if the one member
// followed has a lone surrogate escape in its name, and "" otherwise.
//
// Cost: the common case is decided without parsing. When no member name
// of the document has an escape, every member named N is the bytes "N"
// (quoted), and, the field being found (jsonField asks only then), a
// duplicate on the path shows as one occurrence more than the path's own
// members of that name (pathStep.named); vectorized searches for a `\`
// and for the rarest byte of each step's name rule that out. Otherwise (an
// escaped name, or the name also used elsewhere) pathScan walks the
// objects on the path, skipping the values of other members.
func pathReason(doc string, steps []pathStep) string {
	if namesUnescaped(doc) {
		clean := true
		for i := range steps {
			if occurrences(doc, &steps[i], steps[i].named+1) > steps[i].named {
				clean = false
				break
			}
		}
		if clean {
			return ""
		}
	}
	return pathScan(doc, steps)
}

// namesUnescaped reports whether no string with an escape in doc is a
// member name (followed by ':'). A `\` occurs only in strings, and the
// first one of a string is where stringEnd can start counting; strings
// without one are never looked at.
func namesUnescaped(doc string) bool {
	for i := 0; ; {
		j := strings.IndexByte(doc[i:], '\\')
		if j < 0 {
			return true
		}
		end := stringEnd(doc, i+j)
		if end < 0 {
			return false
		}
		k := end
		for k < len(doc) && doc[k] <= ' ' {
			k++
		}
		if k < len(doc) && doc[k] == ':' {
			return false
		}
		i = end
	}
}

// occurrences counts where st.quoted occurs in s, up to limit: every
// member spelled so is one of them. It looks for the name's rarest byte
// (IndexByte, vectorized) and compares around it, because a search led by
// the quote would stop at every string of the document.
func occurrences(s string, st *pathStep, limit int) int {
	q, k := st.quoted, st.rare
	n := 0
	for i := k; n < limit && i < len(s); {
		j := strings.IndexByte(s[i:], q[k])
		if j < 0 {
			break
		}
		at := i + j - k
		if at+len(q) <= len(s) && s[at:at+len(q)] == q {
			n++
		}
		i += j + 1
	}
	return n
}

// pathScan walks doc along steps the way gjson does — from the first { or
// [, a member by its unescaped name, an element by its index — and
// reports what pathReason reports. It is iterative and reads each byte at
// most a few times whatever the input, so it is safe on the unvalidated
// values of LazyJSONValidation.
func pathScan(doc string, steps []pathStep) string {
	i := strings.IndexAny(doc, "{[")
	if i < 0 {
		return ""
	}
	for s := range steps {
		st := &steps[s]
		var v int // start of the value the step selects, -1 if none
		if doc[i] == '[' {
			v = arrayElement(doc, i+1, st.index)
		} else {
			var reason string
			if v, reason = objectMember(doc, i+1, st.name); reason != "" {
				return reason
			}
		}
		if v < 0 || v >= len(doc) || s == len(steps)-1 || (doc[v] != '{' && doc[v] != '[') {
			return ""
		}
		i = v
	}
	return ""
}

// objectMember returns the start of the value of the member named name in
// the object whose members start at doc[i:] (-1 if there is none), or a
// reason.
func objectMember(doc string, i int, name string) (int, string) {
	v, lone := -1, false
	for {
		for i < len(doc) && doc[i] != '"' && doc[i] != '}' {
			i++
		}
		if i >= len(doc) || doc[i] == '}' {
			break
		}
		end := stringEnd(doc, i+1)
		if end < 0 {
			break
		}
		raw := doc[i+1 : end-1]
		i = skipValue(doc, end)
		if !nameMatches(raw, name) {
			continue
		}
		if v >= 0 {
			return -1, ReasonDuplicateKeyField
		}
		v = valueStart(doc, end)
		lone = strings.IndexByte(raw, '\\') >= 0 && hasLoneSurrogate(raw)
	}
	if lone {
		return -1, ReasonMalformedJSON
	}
	return v, ""
}

// arrayElement returns the start of element idx of the array whose
// elements start at doc[i:], -1 if there is none.
func arrayElement(doc string, i, idx int) int {
	if idx < 0 {
		return -1
	}
	for n := 0; ; n++ {
		i = valueStart(doc, i)
		if i >= len(doc) || doc[i] == ']' {
			return -1
		}
		if n == idx {
			return i
		}
		next := skipValue(doc, i)
		if next == i {
			return -1 // not a value: malformed
		}
		i = next
	}
}

// valueStart skips white space, ':' and ',' from doc[i:].
func valueStart(doc string, i int) int {
	for i < len(doc) && (doc[i] <= ' ' || doc[i] == ':' || doc[i] == ',') {
		i++
	}
	return i
}

// skipValue returns the index just after the value at or after doc[i:]
// (after white space and a ':').
func skipValue(doc string, i int) int {
	i = valueStart(doc, i)
	if i >= len(doc) {
		return i
	}
	switch doc[i] {
	case '"':
		if end := stringEnd(doc, i+1); end >= 0 {
			return end
		}
		return len(doc)
	case '{', '[':
		depth := 0
		for ; i < len(doc); i++ {
			switch doc[i] {
			case '"':
				end := stringEnd(doc, i+1)
				if end < 0 {
					return len(doc)
				}
				i = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return i
	}
	for i < len(doc) && doc[i] > ' ' && doc[i] != ',' && doc[i] != '}' && doc[i] != ']' {
		i++
	}
	return i
}

// stringEnd returns the index after the quote that closes the string
// whose text starts at doc[i:], -1 if it is not closed.
func stringEnd(doc string, i int) int {
	start := i
	for {
		q := strings.IndexByte(doc[i:], '"')
		if q < 0 {
			return -1
		}
		q += i
		b := q
		for b > start && doc[b-1] == '\\' {
			b--
		}
		if (q-b)%2 == 0 {
			return q + 1
		}
		i = q + 1
	}
}

// nameMatches reports whether gjson takes the member name raw (between
// its quotes, as written) for the path step name: the raw bytes if it has
// no escape, else its unescaped text.
func nameMatches(raw, name string) bool {
	if strings.IndexByte(raw, '\\') < 0 {
		return raw == name
	}
	return unescapedIs(raw, name)
}

// unescapedIs reports whether raw unescapes to want, decoding exactly as
// gjson's unescape does (a lone surrogate is U+FFFD and takes a following
// \u escape with it; an invalid escape or a control character ends the
// text), without allocating.
func unescapedIs(raw, want string) bool {
	w := 0
	next := func(b byte) bool {
		if w < len(want) && want[w] == b {
			w++
			return true
		}
		return false
	}
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case c < ' ':
			return w == len(want)
		case c != '\\':
			if !next(c) {
				return false
			}
			continue
		}
		if i++; i >= len(raw) {
			return w == len(want)
		}
		var b byte
		switch raw[i] {
		case '\\', '/', '"':
			b = raw[i]
		case 'b':
			b = '\b'
		case 'f':
			b = '\f'
		case 'n':
			b = '\n'
		case 'r':
			b = '\r'
		case 't':
			b = '\t'
		case 'u':
			if i+5 > len(raw) {
				return w == len(want)
			}
			r := hex4(raw[i+1:])
			i += 5
			if utf16.IsSurrogate(r) && len(raw)-i >= 6 && raw[i] == '\\' && raw[i+1] == 'u' {
				r = utf16.DecodeRune(r, hex4(raw[i+2:]))
				i += 6
			}
			i--
			var enc [utf8.UTFMax]byte
			for _, e := range enc[:utf8.EncodeRune(enc[:], r)] {
				if !next(e) {
					return false
				}
			}
			continue
		default:
			return w == len(want)
		}
		if !next(b) {
			return false
		}
	}
	return w == len(want)
}

// hex4 reads four hex digits as gjson does: anything else is 0.
func hex4(s string) rune {
	var r rune
	for i := 0; i < 4; i++ {
		c := s[i]
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0
		}
		r = r<<4 | rune(c)
	}
	return r
}

// hasLoneSurrogate reports whether the JSON string text s (escapes as
// written) has a \u escape of a UTF-16 surrogate (U+D800–U+DFFF) that is
// not a high surrogate directly followed by a low one.
//
// Such a string is refused (ReasonMalformedJSON) rather than keyed. It
// has no Unicode text, and readers disagree about it: gjson and Go's
// encoding/json read U+FFFD, so "S\ud800", "S\udbff" and "S\ufffd" would
// be one key, while JavaScript keeps each escape, so downstream they are
// three values; gjson even reads "\ud800\u0041" as U+FFFD alone. Keying
// the escape by its own bytes (WTF-8) would keep them apart but join
// "S\ud800" with the raw bytes ED A0 80, which --normalize none keys as
// they are and every reader takes for something else. Refusing never
// joins two values and never splits one: a lone surrogate can only be
// written as an escape, so no spelling of such a value has a key.
func hasLoneSurrogate(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			continue
		}
		if i++; i >= len(s) || s[i] != 'u' || i+5 > len(s) {
			continue
		}
		r := hex4(s[i+1:])
		i += 4
		switch {
		case !utf16.IsSurrogate(r):
		case r >= 0xDC00:
			return true // a low surrogate without its high one
		case i+7 > len(s) || s[i+1] != '\\' || s[i+2] != 'u':
			return true
		default:
			if lo := hex4(s[i+3:]); lo < 0xDC00 || lo > 0xDFFF {
				return true
			}
			i += 6
		}
	}
	return false
}
