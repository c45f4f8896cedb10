// Package keys extracts the dedup key of a Kafka record.
//
// A key spec names where the key lives:
//
//	key            the Kafka message key
//	header:NAME    the value of the record header NAME (the last one if repeated)
//	json:PATH      a field of a JSON value, as a gjson path (json:order.id)
//
// The url normalization may add opt-in rules (WithURLRules,
// NormalizeURLRules) that merge more spellings of one page.
//
// Several comma-separated parts ("json:customer,json:order_id") form a
// compound key. Each part is normalized on its own (none, trim, lower, url)
// and the parts are joined with a 4-byte big-endian length before each part,
// so that ("ab","c") and ("a","bc") never produce the same key. A single-part
// key is the normalized bytes themselves, without a prefix.
//
// Cost: for the key and json: specs with the none, trim or lower
// normalizations, Extract allocates nothing when dst has enough capacity.
// A JSON field is located with a path scanner (github.com/tidwall/gjson)
// on the raw bytes; the document is never decoded into Go values. The
// duplicate check costs a vectorized search for a backslash and one per
// path level when the value has none and the level's name occurs nowhere
// else, else one scan of the objects on the path (BenchmarkExtract,
// json-escaped). The url
// normalization parses the URL itself, leniently as a browser does (see
// NormalizeURL), and allocates only for an internationalized host, a tab or
// newline inside the URL, or a query whose parameters are not yet sorted.
//
// JSON values: a string field yields its unescaped text, a number its raw
// text as written (so 12, 12.0 and 1.2e1 are different keys, and the number
// 12 equals the string "12"), true/false their text. A null field or an
// empty string is ReasonEmpty, an absent field ReasonMissing. An object or
// array is refused (ReasonUnsupportedType) rather than keyed by its raw text:
// the same object can be written with other spacing or key order, so its raw
// text is no stable identity, and a path that ends on an object is almost
// always a mistake in the key spec. Values nesting arrays and objects deeper
// than 512 levels are malformed_json: the validator is recursive, and such
// input must not exhaust the stack.
//
// A key field means one thing or the record is bad input. An object on the
// path that holds the path's member twice is ReasonDuplicateKeyField:
// gjson would read the first of {"id":"X1","id":"Y1"}, Go's encoding/json
// and JavaScript's JSON.parse read the last, so keying by either lets a
// duplicate through or drops an event downstream sees only once. Names are
// compared unescaped ("id" and "\u0069d" are one name). Only the objects
// the path passes through count: for json:a.b, {"a":{"b":1},"a":{"b":2}} and
// {"a":{"b":1,"b":2}} are duplicates, {"b":1,"a":{"b":2}} and
// {"x":1,"x":2,"a":{"b":3}} are not. A string with a \u escape of a lone
// surrogate (U+D800-U+DFFF, not a high one followed by a low one) is
// malformed_json: it has no Unicode text, and readers disagree about it
// (see hasLoneSurrogate); a raw invalid UTF-8 byte is not an escape and
// stays as it is (invalid_utf8 under a textual normalization). Paths that
// make gjson compute a value (a leading "..", "!", "[" or "{", or ".[" and
// ".{" inside) are refused by NewExtractor.
//
// A record whose key cannot be extracted yields an *Error whose Reason is
// one of the Reason* constants; the set is small and fixed so it can be used
// as a metric label and as the bloomgate-error header value.
package keys

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
	"unsafe"

	"github.com/segmentio/kafka-go"
	"github.com/tidwall/gjson"
)

// Reasons a key cannot be extracted.
const (
	ReasonMissing         = "missing"          // the header or JSON field is absent
	ReasonEmpty           = "empty"            // present but empty (also JSON null, or blank after trim)
	ReasonMalformedJSON   = "malformed_json"   // the value is not valid JSON (json: specs)
	ReasonTooLarge        = "too_large"        // the key exceeds the configured maximum size
	ReasonInvalidUTF8     = "invalid_utf8"     // not UTF-8 under a textual normalization
	ReasonNullKey         = "null_key"         // the Kafka message key is null (key spec; an empty one is "empty")
	ReasonBadURL          = "bad_url"          // not an absolute URL with a host (url normalization)
	ReasonUnsupportedType = "unsupported_type" // a JSON object or array where a scalar key was expected
	// ReasonDuplicateKeyField: an object on the json: path holds the
	// path's member twice ({"id":"X1","id":"Y1"}), so readers disagree
	// about the key.
	ReasonDuplicateKeyField = "duplicate_key_field"
	// ReasonNullValue: the record's value is null (a tombstone) and the
	// key is a field of it.
	ReasonNullValue = "null_value"
)

// Reasons lists every reason Extract can report, for creating metric label
// sets up front.
func Reasons() []string {
	return []string{ReasonMissing, ReasonEmpty, ReasonMalformedJSON, ReasonTooLarge,
		ReasonInvalidUTF8, ReasonNullKey, ReasonBadURL, ReasonUnsupportedType, ReasonDuplicateKeyField, ReasonNullValue}
}

// Error reports why a record has no usable key.
type Error struct {
	Reason string // one of the Reason* constants
	Part   string // the spec part that failed, e.g. "json:order_id"
}

func (e *Error) Error() string {
	return fmt.Sprintf("extracting key %s: %s", e.Part, e.Reason)
}

// ReasonOf returns the Reason of an *Error in err's chain, or "" if none.
func ReasonOf(err error) string {
	var ke *Error
	if errors.As(err, &ke) {
		return ke.Reason
	}
	return ""
}

// Spec is a key spec: "key" | "header:NAME" | "json:PATH", comma-separated
// for a compound key.
type Spec string

// Normalize names a normalization applied to each key part.
type Normalize string

// Normalizations.
const (
	NormNone  Normalize = "none"  // bytes as they are; binary keys allowed
	NormTrim  Normalize = "trim"  // strip leading and trailing Unicode white space
	NormLower Normalize = "lower" // Unicode lower case
	NormURL   Normalize = "url"   // canonical URL, see NormalizeURL
)

// DefaultMaxKeyBytes is used when NewExtractor is given 0.
const DefaultMaxKeyBytes = 4096

type source uint8

const (
	fromKey source = iota
	fromHeader
	fromJSON
)

type part struct {
	src   source
	name  string     // header name or gjson path
	steps []pathStep // the levels of a gjson path
	text  string     // the spec part, for errors
}

// Extractor extracts dedup keys. It holds no per-record state and is safe
// for concurrent use.
type Extractor struct {
	parts    []part
	norm     Normalize
	maxBytes int
	lazyJSON bool
	urlRules *URLRules // on top of NormURL; nil: none
	// errs are allocated once so that reporting a bad record allocates nothing.
	errs map[errKey]*Error
}

type errKey struct {
	part   int
	reason string
}

// Option tunes an Extractor.
type Option func(*Extractor)

// LazyJSONValidation validates a JSON value only when the key field cannot be
// used, instead of validating every value before reading the field. A value
// that is malformed after (or around) an intact key field then yields that
// key instead of ReasonMalformedJSON. Validation is a full scan of the value
// and costs about three times the field lookup (see BenchmarkJSONValidation).
func LazyJSONValidation() Option { return func(e *Extractor) { e.lazyJSON = true } }

// NewExtractor parses spec and norm. maxKeyBytes bounds the extracted key
// (after normalization, including compound-key length prefixes); 0 means
// DefaultMaxKeyBytes. By default every JSON value is validated in full
// before a field is read.
func NewExtractor(spec string, norm string, maxKeyBytes int, opts ...Option) (*Extractor, error) {
	if maxKeyBytes < 0 {
		return nil, fmt.Errorf("max key bytes %d: must be positive (0 for the default %d)", maxKeyBytes, DefaultMaxKeyBytes)
	}
	if maxKeyBytes == 0 {
		maxKeyBytes = DefaultMaxKeyBytes
	}
	n, err := ParseNormalize(norm)
	if err != nil {
		return nil, err
	}
	parts, err := parseSpec(spec)
	if err != nil {
		return nil, err
	}
	e := &Extractor{parts: parts, norm: n, maxBytes: maxKeyBytes, errs: make(map[errKey]*Error)}
	for _, o := range opts {
		o(e)
	}
	if e.urlRules != nil && n != NormURL {
		return nil, fmt.Errorf("%w (normalization is %s): set --normalize url, or remove --url-rules and --url-strip-params", ErrURLRulesNeedURL, n)
	}
	for i, p := range parts {
		for _, r := range Reasons() {
			e.errs[errKey{i, r}] = &Error{Reason: r, Part: p.text}
		}
	}
	return e, nil
}

// ParseNormalize checks a normalization name; "" means none.
func ParseNormalize(s string) (Normalize, error) {
	switch n := Normalize(strings.ToLower(strings.TrimSpace(s))); n {
	case "", NormNone:
		return NormNone, nil
	case NormTrim, NormLower, NormURL:
		return n, nil
	}
	return "", fmt.Errorf("normalization %q: must be one of none, trim, lower, url", s)
}

// ValidateSpec checks a key spec without building an extractor.
func ValidateSpec(spec string) error {
	_, err := parseSpec(spec)
	return err
}

func parseSpec(spec string) ([]part, error) {
	if strings.TrimSpace(spec) == "" {
		return nil, errors.New("key spec is empty: use key, header:NAME or json:PATH")
	}
	var parts []part
	for _, raw := range strings.Split(spec, ",") {
		t := strings.TrimSpace(raw)
		var p part
		switch {
		case t == "key":
			p = part{src: fromKey}
		case strings.HasPrefix(t, "header:"):
			p = part{src: fromHeader, name: strings.TrimPrefix(t, "header:")}
			if p.name == "" {
				return nil, fmt.Errorf("key spec part %q: header name is empty (use header:NAME)", t)
			}
		case strings.HasPrefix(t, "json:"):
			p = part{src: fromJSON, name: strings.TrimPrefix(t, "json:")}
			if p.name == "" {
				return nil, fmt.Errorf("key spec part %q: JSON path is empty (use json:PATH, e.g. json:order.id)", t)
			}
			if strings.ContainsAny(p.name, "@|#*?") {
				// Modifiers, queries and wildcards select computed or multiple
				// values; a dedup key must be one field of the document.
				return nil, fmt.Errorf("key spec part %q: only plain dotted paths are supported (no @, |, #, *, ?)", t)
			}
			if why := computedPath(p.name); why != "" {
				// The same: a value gjson computes is no field of the
				// document, and the duplicate check follows fields.
				return nil, fmt.Errorf("key spec part %q: only plain dotted paths are supported: %s "+
					"(for a field whose name has such a character, escape it with \\, as in json:\\[x)", t, why)
			}
			p.steps = parsePath(p.name)
		case t == "":
			return nil, fmt.Errorf("key spec %q: empty part", spec)
		default:
			hint := ""
			if !strings.Contains(t, ":") {
				hint = fmt.Sprintf(" (a field of the JSON value is json:%s; a header, header:%s)", t, t)
			}
			return nil, fmt.Errorf("key spec part %q: must be key, header:NAME or json:PATH%s", t, hint)
		}
		p.text = t
		parts = append(parts, p)
	}
	return parts, nil
}

// Spec returns the parts of the key spec, normalized.
func (e *Extractor) Spec() string {
	s := make([]string, len(e.parts))
	for i, p := range e.parts {
		s[i] = p.text
	}
	return strings.Join(s, ",")
}

// NeedsJSON reports whether any part reads the JSON value.
func (e *Extractor) NeedsJSON() bool {
	for _, p := range e.parts {
		if p.src == fromJSON {
			return true
		}
	}
	return false
}

// Extract appends the dedup key of one record to dst and returns the
// extended slice. On error it returns dst unchanged and an *Error.
func (e *Extractor) Extract(dst []byte, key, value []byte, headers []kafka.Header) ([]byte, error) {
	start := len(dst)
	compound := len(e.parts) > 1
	validated := false
	for i := range e.parts {
		p := &e.parts[i]
		var (
			raw    string
			reason string
		)
		switch p.src {
		case fromKey:
			if key == nil {
				reason = ReasonNullKey
			} else if len(key) == 0 {
				reason = ReasonEmpty
			}
			raw = bytesToString(key)
		case fromHeader:
			found := false
			for j := len(headers) - 1; j >= 0; j-- {
				if headers[j].Key == p.name {
					raw, found = bytesToString(headers[j].Value), true
					break
				}
			}
			switch {
			case !found:
				reason = ReasonMissing
			case raw == "":
				reason = ReasonEmpty
			}
		case fromJSON:
			if value == nil {
				// A tombstone: no document, not a malformed one.
				return dst[:start], e.errs[errKey{i, ReasonNullValue}]
			}
			if len(value) > maxJSONDepth && tooDeep(value) {
				// gjson validates recursively: a value of millions of '['
				// would exhaust the goroutine stack, a fatal error.
				return dst[:start], e.errs[errKey{i, ReasonMalformedJSON}]
			}
			if !validated && !e.lazyJSON {
				if !gjson.ValidBytes(value) {
					return dst[:start], e.errs[errKey{i, ReasonMalformedJSON}]
				}
				validated = true
			}
			raw, reason = jsonField(bytesToString(value), p)
			if reason != "" && !validated && !gjson.ValidBytes(value) {
				reason = ReasonMalformedJSON
			}
		}
		if reason != "" {
			return dst[:start], e.errs[errKey{i, reason}]
		}
		if len(raw) > 3*e.maxBytes+64 {
			// No normalization shrinks a value by more than 3x (percent-
			// decoding); refuse early instead of scanning a huge value.
			return dst[:start], e.errs[errKey{i, ReasonTooLarge}]
		}
		lenAt := len(dst)
		if compound {
			dst = append(dst, 0, 0, 0, 0)
		}
		partAt := len(dst)
		var err string
		dst, err = e.normalize(dst, raw)
		if err == "" && len(dst) == partAt {
			err = ReasonEmpty
		}
		if err == "" && len(dst)-start > e.maxBytes {
			err = ReasonTooLarge
		}
		if err != "" {
			return dst[:start], e.errs[errKey{i, err}]
		}
		if compound {
			binary.BigEndian.PutUint32(dst[lenAt:], uint32(len(dst)-partAt))
		}
	}
	return dst, nil
}

// maxJSONDepth is the deepest nesting of arrays and objects accepted in a
// JSON value; deeper values are malformed_json.
const maxJSONDepth = 512

// tooDeep reports whether the JSON text nests arrays and objects deeper than
// maxJSONDepth. Brackets inside strings do not count.
func tooDeep(b []byte) bool {
	depth, inString := 0, false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if inString {
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '[', '{':
			if depth++; depth > maxJSONDepth {
				return true
			}
		case ']', '}':
			depth--
		}
	}
	return false
}

// normalize appends the normalized form of raw to dst, or returns a reason.
func (e *Extractor) normalize(dst []byte, raw string) ([]byte, string) {
	switch e.norm {
	case NormTrim:
		if !utf8.ValidString(raw) {
			return dst, ReasonInvalidUTF8
		}
		return append(dst, strings.TrimSpace(raw)...), ""
	case NormLower:
		if !utf8.ValidString(raw) {
			return dst, ReasonInvalidUTF8
		}
		return appendLower(dst, raw), ""
	case NormURL:
		if !utf8.ValidString(raw) {
			return dst, ReasonInvalidUTF8
		}
		out, err := normalizeURL(dst, raw, e.urlRules)
		if err != nil {
			return dst, ReasonBadURL
		}
		return out, ""
	default:
		return append(dst, raw...), ""
	}
}

// appendLower appends the Unicode lower case of s (valid UTF-8) to dst
// without allocating beyond dst's growth.
func appendLower(dst []byte, s string) []byte {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			dst = append(dst, c)
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		dst = utf8.AppendRune(dst, unicode.ToLower(r))
		i += n
	}
	return dst
}

// bytesToString views b as a string without copying. The result must not
// outlive b or be retained after b changes; Extract only reads it before
// returning.
func bytesToString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(unsafe.SliceData(b), len(b))
}
