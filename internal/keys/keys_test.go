package keys

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

func TestNewExtractorErrors(t *testing.T) {
	tests := []struct {
		spec, norm string
		max        int
		want       string
	}{
		{"", "none", 0, "key spec is empty"},
		{"value", "none", 0, "must be key, header:NAME or json:PATH"},
		{"header:", "none", 0, "header name is empty"},
		{"json:", "none", 0, "JSON path is empty"},
		{"json:a.#", "none", 0, "only plain dotted paths"},
		{"key,,json:a", "none", 0, "empty part"},
		{"key", "upper", 0, "must be one of none, trim, lower, url"},
		{"key", "none", -1, "must be positive"},
	}
	for _, tt := range tests {
		_, err := NewExtractor(tt.spec, tt.norm, tt.max)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewExtractor(%q, %q, %d) = %v, want error containing %q", tt.spec, tt.norm, tt.max, err, tt.want)
		}
	}
}

func compound(parts ...string) []byte {
	var b []byte
	for _, p := range parts {
		b = binary.BigEndian.AppendUint32(b, uint32(len(p)))
		b = append(b, p...)
	}
	return b
}

func TestExtract(t *testing.T) {
	hdr := func(kv ...string) []kafka.Header {
		var hs []kafka.Header
		for i := 0; i+1 < len(kv); i += 2 {
			hs = append(hs, kafka.Header{Key: kv[i], Value: []byte(kv[i+1])})
		}
		return hs
	}
	tests := []struct {
		name    string
		spec    string
		norm    string
		max     int
		key     []byte
		value   string
		headers []kafka.Header
		want    string
		reason  string
	}{
		{name: "kafka key", spec: "key", key: []byte("K-1"), want: "K-1"},
		{name: "null kafka key", spec: "key", key: nil, reason: ReasonNullKey},
		{name: "empty kafka key", spec: "key", key: []byte{}, reason: ReasonEmpty},
		{name: "binary key under none", spec: "key", key: []byte{0xff, 0, 1}, want: "\xff\x00\x01"},
		{name: "binary key under lower", spec: "key", norm: "lower", key: []byte{0xff, 0, 1}, reason: ReasonInvalidUTF8},
		{name: "lower unicode", spec: "key", norm: "lower", key: []byte("ÀBc-ÉTÉ"), want: "àbc-été"},
		{name: "trim", spec: "key", norm: "trim", key: []byte(" \t ab c\n"), want: "ab c"},
		{name: "trim to empty", spec: "key", norm: "trim", key: []byte("  "), reason: ReasonEmpty},
		{name: "too large", spec: "key", max: 4, key: []byte("12345"), reason: ReasonTooLarge},
		{name: "at max", spec: "key", max: 5, key: []byte("12345"), want: "12345"},
		{name: "huge", spec: "key", max: 4, key: bytes.Repeat([]byte("x"), 1<<20), reason: ReasonTooLarge},

		{name: "header", spec: "header:id", headers: hdr("a", "1", "id", "abc"), want: "abc"},
		{name: "header last wins", spec: "header:id", headers: hdr("id", "first", "id", "last"), want: "last"},
		{name: "header missing", spec: "header:id", headers: hdr("a", "1"), reason: ReasonMissing},
		{name: "header empty", spec: "header:id", headers: hdr("id", ""), reason: ReasonEmpty},

		{name: "json string", spec: "json:order_id", value: `{"order_id":"o-17","amount":3}`, want: "o-17"},
		{name: "json nested", spec: "json:order.id", value: `{"order":{"id":"x"}}`, want: "x"},
		{name: "json escaped", spec: "json:id", value: `{"id":"a\"b\u00e9"}`, want: "a\"bé"},
		{name: "json number raw", spec: "json:id", value: `{"id": 12.50 }`, want: "12.50"},
		{name: "json big number raw", spec: "json:id", value: `{"id":123456789012345678901234567890}`, want: "123456789012345678901234567890"},
		{name: "json bool", spec: "json:id", value: `{"id":true}`, want: "true"},
		{name: "json null", spec: "json:id", value: `{"id":null}`, reason: ReasonEmpty},
		{name: "json empty string", spec: "json:id", value: `{"id":""}`, reason: ReasonEmpty},
		{name: "json missing", spec: "json:id", value: `{"other":1}`, reason: ReasonMissing},
		{name: "json object", spec: "json:id", value: `{"id":{"a":1}}`, reason: ReasonUnsupportedType},
		{name: "json array", spec: "json:id", value: `{"id":[1]}`, reason: ReasonUnsupportedType},
		{name: "json malformed", spec: "json:id", value: `{"id":"a",`, reason: ReasonMalformedJSON},
		{name: "json malformed field present", spec: "json:id", value: `{"id":"a" garbage}`, reason: ReasonMalformedJSON},
		{name: "json not json", spec: "json:id", value: `hello`, reason: ReasonMalformedJSON},
		{name: "json empty value", spec: "json:id", value: ``, reason: ReasonMalformedJSON},
		{name: "json top-level scalar", spec: "json:id", value: `"x"`, reason: ReasonMissing},
		{name: "json lower", spec: "json:id", norm: "lower", value: `{"id":"ABC"}`, want: "abc"},
		{name: "json invalid utf8 in string", spec: "json:id", norm: "trim", value: "{\"id\":\"a\xffb\"}", reason: ReasonInvalidUTF8},

		{name: "compound", spec: "json:a, key", key: []byte("k"), value: `{"a":"x"}`, want: string(compound("x", "k"))},
		{name: "compound unambiguous 1", spec: "json:a,json:b", value: `{"a":"ab","b":"c"}`, want: string(compound("ab", "c"))},
		{name: "compound unambiguous 2", spec: "json:a,json:b", value: `{"a":"a","b":"bc"}`, want: string(compound("a", "bc"))},
		{name: "compound missing part", spec: "json:a,json:b", value: `{"a":"a"}`, reason: ReasonMissing},
		{name: "compound too large", spec: "key,key", max: 9, key: []byte("ab"), reason: ReasonTooLarge},

		{name: "url", spec: "json:url", norm: "url", value: `{"url":"HTTP://Example.COM:80/a/./b/../c?b=2&a=1#frag"}`, want: "http://example.com/a/c?a=1&b=2"},
		{name: "bad url", spec: "key", norm: "url", key: []byte("not a url"), reason: ReasonBadURL},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			norm := tt.norm
			if norm == "" {
				norm = "none"
			}
			e, err := NewExtractor(tt.spec, norm, tt.max)
			if err != nil {
				t.Fatal(err)
			}
			prefix := []byte("pre")
			got, err := e.Extract(prefix, tt.key, []byte(tt.value), tt.headers)
			if tt.reason != "" {
				var ke *Error
				if !errors.As(err, &ke) || ke.Reason != tt.reason {
					t.Fatalf("err = %v, want reason %q", err, tt.reason)
				}
				if ReasonOf(err) != tt.reason {
					t.Fatalf("ReasonOf = %q", ReasonOf(err))
				}
				if string(got) != "pre" {
					t.Fatalf("dst changed on error: %q", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error %v", err)
			}
			if string(got) != "pre"+tt.want {
				t.Fatalf("got %q, want %q", got[3:], tt.want)
			}
		})
	}
}

func TestLazyJSONValidation(t *testing.T) {
	strict, _ := NewExtractor("json:id", "none", 0)
	lazy, _ := NewExtractor("json:id", "none", 0, LazyJSONValidation())
	for _, tc := range []struct {
		value, strictReason, lazyReason, lazyKey string
	}{
		{`{"id":"a" garbage`, ReasonMalformedJSON, "", "a"},
		{`{"x":1 garbage`, ReasonMalformedJSON, ReasonMalformedJSON, ""},
		{`{"x":1}`, ReasonMissing, ReasonMissing, ""},
		{`{"id":"b"}`, "", "", "b"},
	} {
		_, err := strict.Extract(nil, nil, []byte(tc.value), nil)
		if ReasonOf(err) != tc.strictReason {
			t.Errorf("strict %s: %v, want %q", tc.value, err, tc.strictReason)
		}
		k, err := lazy.Extract(nil, nil, []byte(tc.value), nil)
		if ReasonOf(err) != tc.lazyReason || string(k) != tc.lazyKey {
			t.Errorf("lazy %s: %q %v, want %q %q", tc.value, k, err, tc.lazyKey, tc.lazyReason)
		}
	}
}

func TestDeepJSONIsMalformedNotFatal(t *testing.T) {
	for _, opts := range [][]Option{nil, {LazyJSONValidation()}} {
		e, err := NewExtractor("json:a", "none", 0, opts...)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range []string{
			strings.Repeat("[", 10_000_000),
			`{"a":"x","b":` + strings.Repeat(`{"c":`, 1_000_000),
			`{"b":"` + strings.Repeat("[", 100_000) + `","a":"ok"}`, // brackets inside a string
			strings.Repeat("[", maxJSONDepth) + strings.Repeat("]", maxJSONDepth),
		} {
			start := time.Now()
			k, err := e.Extract(nil, nil, []byte(v), nil)
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("%d-byte value took %v", len(v), d)
			}
			switch {
			case strings.Contains(v, `"ok"`):
				if string(k) != "ok" {
					t.Errorf("brackets inside strings counted as nesting: %q, %v", k, err)
				}
			case len(v) == 2*maxJSONDepth:
				if ReasonOf(err) != ReasonMissing {
					t.Errorf("nesting at the limit: %v, want missing", err)
				}
			default:
				if ReasonOf(err) != ReasonMalformedJSON {
					t.Errorf("%d-byte deep value: %v, want malformed_json", len(v), err)
				}
			}
		}
	}
}

func TestReasonsAreDistinct(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range Reasons() {
		if seen[r] || r == "" {
			t.Fatalf("reason %q repeated or empty", r)
		}
		seen[r] = true
	}
}

func TestExtractZeroAllocs(t *testing.T) {
	value := []byte(sampleOrder)
	for _, tc := range []struct{ spec, norm string }{
		{"key", "none"}, {"key", "lower"}, {"key", "trim"},
		{"json:order_id", "none"}, {"json:order_id", "lower"}, {"json:customer.id,json:order_id", "none"},
		{"header:id", "none"},
	} {
		e, err := NewExtractor(tc.spec, tc.norm, 0)
		if err != nil {
			t.Fatal(err)
		}
		dst := make([]byte, 0, 256)
		hs := []kafka.Header{{Key: "id", Value: []byte("abc")}}
		key, bad := []byte("ORD-000123"), []byte(`{"x":`)
		dupValue := []byte(`{"order_id":"a","customer":{"id":"b","id":"c"},"order_id":"d"}`)
		// sampleOrderEscaped takes the duplicate check's scan.
		for _, v := range [][]byte{value, []byte(sampleOrderEscaped)} {
			allocs := testing.AllocsPerRun(100, func() {
				if _, err := e.Extract(dst[:0], key, v, hs); err != nil {
					t.Fatal(err)
				}
			})
			if allocs != 0 {
				t.Errorf("%s/%s: %v allocs per Extract, want 0", tc.spec, tc.norm, allocs)
			}
		}
		// Errors are preallocated too. (A key string with escapes, a lone
		// surrogate among them, allocates: gjson unescapes it into a new
		// string.)
		for _, v := range [][]byte{bad, dupValue} {
			allocs := testing.AllocsPerRun(100, func() {
				_, _ = e.Extract(dst[:0], nil, v, nil)
			})
			if allocs != 0 {
				t.Errorf("%s/%s error path %s: %v allocs, want 0", tc.spec, tc.norm, v, allocs)
			}
		}
	}
}

// sampleOrderEscaped is sampleOrder with a customer name as Python's
// json.dumps writes it (non-ASCII escaped).
const sampleOrderEscaped = `{"order_id":"ORD-0000123456","amount":129.95,"currency":"EUR","customer":{"id":"C-884211","country":"DE","name":"Jos\u00e9 M\u00fcller"},"items":[{"sku":"SKU-1","qty":2},{"sku":"SKU-9","qty":1}],"ts":"2026-11-22T04:00:00.123Z"}`

const sampleOrder = `{"order_id":"ORD-0000123456","amount":129.95,"currency":"EUR","customer":{"id":"C-884211","country":"DE"},"items":[{"sku":"SKU-1","qty":2},{"sku":"SKU-9","qty":1}],"ts":"2026-11-22T04:00:00.123Z"}`

// TestSpecSuggestsJSONField: a bare field name is refused with the spec
// that reads it.
func TestSpecSuggestsJSONField(t *testing.T) {
	_, err := NewExtractor("order_id", "none", 0)
	if err == nil || !strings.Contains(err.Error(), "json:order_id") || !strings.Contains(err.Error(), "header:order_id") {
		t.Fatalf("--key order_id: %v", err)
	}
}

// TestTombstoneIsNullValue: a record whose value is null (a tombstone) has
// no JSON field: null_value, not malformed_json; an empty value is still
// malformed.
func TestTombstoneIsNullValue(t *testing.T) {
	ex, err := NewExtractor("json:order_id", "none", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		value []byte
		want  string
	}{{nil, ReasonNullValue}, {[]byte{}, ReasonMalformedJSON}} {
		_, err := ex.Extract(nil, []byte("k"), tc.value, nil)
		var ke *Error
		if !errors.As(err, &ke) || ke.Reason != tc.want {
			t.Errorf("value %v: %v, want %s", tc.value, err, tc.want)
		}
	}
}
