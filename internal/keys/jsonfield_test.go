package keys

import (
	"strings"
	"testing"
)

// TestDuplicateKeyField: a key field present twice in an object on the
// path is bad input, whatever the values; duplicates elsewhere do not
// matter. Every case runs with and without LazyJSONValidation.
func TestDuplicateKeyField(t *testing.T) {
	const dup = ReasonDuplicateKeyField
	tests := []struct {
		name, spec, value string
		want, reason      string
	}{
		{"issue 41", "json:order_id", `{"order_id":"X1","order_id":"Y1"}`, "", dup},
		{"same value twice", "json:id", `{"id":"X","id":"X"}`, "", dup},
		{"escaped spelling", "json:id", `{"id":"X","\u0069d":"Y"}`, "", dup},
		{"escaped first", "json:id", `{"\u0069\u0064":"X","id":"Y"}`, "", dup},
		{"other name with escape", "json:id", `{"id":"X","i\"d":"Y","i\\d":"Z"}`, "X", ""},
		{"null then a value", "json:id", `{"id":null,"id":"X"}`, "", dup},
		{"empty then a value", "json:id", `{"id":"","id":"X"}`, "", dup},
		{"object then a value", "json:id", `{"id":{},"id":"X"}`, "", dup},
		{"number twice", "json:id", `{"id":1,"id":2}`, "", dup},
		{"name also a value", "json:id", `{"type":"id","id":"X","ref":"id"}`, "X", ""},
		{"overlapping spellings", "json:aa", `{"aaa":"1","a":"aa","aa":"2","aa":"3"}`, "", dup},
		{"overlapping spellings once", "json:aa", `{"aaa":"1","a":"aa","aa":"2"}`, "2", ""},
		{"name inside a string", "json:id", `{"note":"\"id\":\"Y\"","id":"X"}`, "X", ""},
		{"escaped text, then twice", "json:id", `{"name":"Jos\u00e9","id":"X","id":"Y"}`, "", dup},
		{"escaped text, then an escaped spelling", "json:id", `{"name":"Jos\u00e9","id":"X", "\u0069d" :"Y"}`, "", dup},
		{"escaped text elsewhere", "json:id", `{"name":"Jos\u00e9","id":"X","tags":["a\\\"{["]}`, "X", ""},

		{"nested: outer twice", "json:a.b", `{"a":{"b":"1"},"a":{"b":"2"}}`, "", dup},
		{"nested: inner twice", "json:a.b", `{"a":{"b":"1","b":"2"}}`, "", dup},
		{"nested: first not an object", "json:a.b", `{"a":1,"a":{"b":"2"}}`, "", dup},
		{"nested: second not an object", "json:a.b", `{"a":{"b":"1"},"a":1}`, "", dup},
		{"nested: name on another level", "json:a.b", `{"b":"1","a":{"b":"2"}}`, "2", ""},
		{"nested: duplicate off the path", "json:a.b", `{"x":1,"x":2,"a":{"b":"3"}}`, "3", ""},
		{"nested: duplicate in a sibling", "json:a.b", `{"a":{"b":"3"},"c":{"b":4,"b":5}}`, "3", ""},
		{"nested: duplicate below the field", "json:a.b", `{"a":{"b":"3","c":{"b":1,"b":2}}}`, "3", ""},
		{"nested: duplicate in a value skipped", "json:a.b", `{"z":{"a":1,"a":2},"a":{"b":"3"}}`, "3", ""},
		{"nested: absent in every reading", "json:a.b", `{"a":1,"a":2}`, "", ReasonMissing},
		{"same name twice on the path", "json:a.a", `{"a":{"a":"X"}}`, "X", ""},
		{"same name: inner twice", "json:a.a", `{"a":{"a":"X","a":"Y"}}`, "", dup},
		{"same name: outer twice", "json:a.a", `{"a":{"a":"X"},"a":1}`, "", dup},

		{"array element", "json:a.1.b", `{"a":[{"b":"1"},{"b":"2"}]}`, "2", ""},
		{"array: duplicate in the element", "json:a.0.b", `{"a":[{"b":"1","b":"2"}]}`, "", dup},
		{"array: duplicate in another element", "json:a.0.b", `{"a":[{"b":"1"},{"b":"2","b":"3"}]}`, "1", ""},
		{"array: elements with strings and arrays", "json:2.id", `["x,]",[1,[2]],{"id":"K"}]`, "K", ""},
		{"top-level array", "json:1.id", `[{"id":"1","id":"0"},{"id":"2"}]`, "2", ""},
		{"digits as a member name", "json:0", `{"0":"x","0":"y"}`, "", dup},
		{"digits: once", "json:0", `{"0":"x","1":"0"}`, "x", ""},
		{"escaped dot in the path", `json:a\.b`, `{"a.b":"X","a.b":"Y"}`, "", dup},
		{"escaped dot: other fields", `json:a\.b`, `{"a.b":"X","a":{"b":"Y"}}`, "X", ""},
		{"compound: second part", "json:a,json:b", `{"a":"x","b":"1","b":"2"}`, "", dup},
	}
	for _, tt := range tests {
		for _, lazy := range []bool{false, true} {
			var opts []Option
			if lazy {
				opts = append(opts, LazyJSONValidation())
			}
			e, err := NewExtractor(tt.spec, "none", 0, opts...)
			if err != nil {
				t.Fatal(err)
			}
			got, err := e.Extract(nil, nil, []byte(tt.value), nil)
			if ReasonOf(err) != tt.reason || string(got) != tt.want {
				t.Errorf("%s (lazy %v): %s %s = %q, %v; want %q, reason %q", tt.name, lazy, tt.spec, tt.value, got, err, tt.want, tt.reason)
			}
		}
	}
}

// TestDuplicateKeyFieldMalformedLazy: a duplicate in a value that is
// malformed too reports malformed_json, also when validation is lazy.
func TestDuplicateKeyFieldMalformedLazy(t *testing.T) {
	for _, opts := range [][]Option{nil, {LazyJSONValidation()}} {
		e, _ := NewExtractor("json:id", "none", 0, opts...)
		if _, err := e.Extract(nil, nil, []byte(`{"id":"X","id":"Y"`), nil); ReasonOf(err) != ReasonMalformedJSON {
			t.Errorf("%v, want malformed_json", err)
		}
	}
}

// TestLoneSurrogates: a \u escape of a lone surrogate in the key string is
// malformed_json; valid pairs, U+FFFD itself, an escaped backslash before
// "ud800" and raw invalid bytes keep their keys.
func TestLoneSurrogates(t *testing.T) {
	tests := []struct {
		name, norm, value string
		want, reason      string
	}{
		{"high alone", "none", `{"id":"S\ud800"}`, "", ReasonMalformedJSON},
		{"other high alone", "none", `{"id":"S\udbff"}`, "", ReasonMalformedJSON},
		{"low alone", "none", `{"id":"S\udc00"}`, "", ReasonMalformedJSON},
		{"high then text", "none", `{"id":"S\ud800x"}`, "", ReasonMalformedJSON},
		{"high then a non-surrogate escape", "none", `{"id":"S\ud800\u0041"}`, "", ReasonMalformedJSON},
		{"high then high", "none", `{"id":"\ud800\ud800"}`, "", ReasonMalformedJSON},
		{"low then high", "none", `{"id":"\udc00\ud800"}`, "", ReasonMalformedJSON},
		{"upper-case hex", "none", `{"id":"S\uD800"}`, "", ReasonMalformedJSON},
		{"alone under lower", "lower", `{"id":"S\ud800"}`, "", ReasonMalformedJSON},
		{"U+FFFD itself", "none", `{"id":"S\ufffd"}`, "S\uFFFD", ""},
		{"valid pair", "none", `{"id":"\ud83d\ude00"}`, "\U0001F600", ""},
		{"valid pair, upper case", "none", `{"id":"x\uD83D\uDE00y"}`, "x\U0001F600y", ""},
		{"escaped backslash", "none", `{"id":"S\\ud800"}`, `S\ud800`, ""},
		{"raw invalid bytes stay", "none", "{\"id\":\"S\xed\xa0\x80\"}", "S\xed\xa0\x80", ""},
		{"raw invalid bytes under trim", "trim", "{\"id\":\"S\xed\xa0\x80\"}", "", ReasonInvalidUTF8},
		{"elsewhere in the value", "none", `{"x":"\ud800","id":"K"}`, "K", ""},
	}
	for _, tt := range tests {
		e, err := NewExtractor("json:id", tt.norm, 0)
		if err != nil {
			t.Fatal(err)
		}
		got, err := e.Extract(nil, nil, []byte(tt.value), nil)
		if ReasonOf(err) != tt.reason || string(got) != tt.want {
			t.Errorf("%s: %s = %q, %v; want %q, reason %q", tt.name, tt.value, got, err, tt.want, tt.reason)
		}
	}
	// The names on the path too: gjson reads a lone surrogate in a name as
	// U+FFFD, so only a path with U+FFFD can reach one.
	e, _ := NewExtractor("json:a\uFFFD", "none", 0)
	for _, tt := range []struct{ value, want, reason string }{
		{`{"a\ud800":"X"}`, "", ReasonMalformedJSON},
		{`{"a\ufffd":"X"}`, "X", ""},
		{`{"a\ud800":"X","a\ufffd":"Y"}`, "", ReasonDuplicateKeyField},
	} {
		got, err := e.Extract(nil, nil, []byte(tt.value), nil)
		if ReasonOf(err) != tt.reason || string(got) != tt.want {
			t.Errorf("name: %s = %q, %v; want %q, reason %q", tt.value, got, err, tt.want, tt.reason)
		}
	}
	// The three spellings of issue 41 are no longer one key.
	e, _ = NewExtractor("json:id", "none", 0)
	keys := map[string]bool{}
	for _, v := range []string{`{"id":"S\ud800"}`, `{"id":"S\udbff"}`, `{"id":"S\ufffd"}`} {
		if k, err := e.Extract(nil, nil, []byte(v), nil); err == nil {
			keys[string(k)] = true
		}
	}
	if len(keys) != 1 {
		t.Errorf("keys %v: want only S\\ufffd keyed", keys)
	}
}

// TestComputedPathsRefused: paths whose value gjson computes instead of
// reading a field are refused; escaped, the same characters name a field.
func TestComputedPathsRefused(t *testing.T) {
	for _, spec := range []string{"json:!true", "json:!\"x\"", "json:..0.id", "json:[id]", "json:{id}", "json:a.[0]", "json:a.{b}", "json:a,json:[b]"} {
		if _, err := NewExtractor(spec, "none", 0); err == nil || !strings.Contains(err.Error(), "only plain dotted paths") {
			t.Errorf("%s: %v, want refused", spec, err)
		}
	}
	for _, tc := range []struct{ spec, value, want string }{
		{`json:\!true`, `{"!true":"X"}`, "X"},
		{`json:\[id]`, `{"[id]":"X"}`, "X"},
		{`json:a.\{b}`, `{"a":{"{b}":"X"}}`, "X"},
		{`json:.a`, `{"":{"a":"X"}}`, "X"},
		{`json:a[0]`, `{"a[0]":"X"}`, "X"},
		{"json:!", `{"!":"X"}`, ""}, // one character: refused too, escape it
	} {
		e, err := NewExtractor(tc.spec, "none", 0)
		if tc.want == "" {
			if err == nil {
				t.Errorf("%s accepted", tc.spec)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.spec, err)
		}
		if k, err := e.Extract(nil, nil, []byte(tc.value), nil); string(k) != tc.want {
			t.Errorf("%s %s = %q, %v; want %q", tc.spec, tc.value, k, err, tc.want)
		}
	}
}

func TestParsePath(t *testing.T) {
	for _, tc := range []struct {
		path string
		want []pathStep
	}{
		{"a", []pathStep{{name: "a", quoted: `"a"`, rare: 1, index: -1, named: 1}}},
		{"a.0.a", []pathStep{
			{name: "a", quoted: `"a"`, rare: 1, index: -1, named: 2},
			{name: "0", quoted: `"0"`, rare: 1, index: 0, named: 0},
			{name: "a", quoted: `"a"`, rare: 1, index: -1, named: 2},
		}},
		{`a\.b.\1`, []pathStep{
			{name: "a.b", quoted: `"a.b"`, rare: 3, index: -1, named: 1},
			{name: "1", quoted: `"1"`, rare: 1, index: -1, named: 1}, // escaped: a name, never an index
		}},
		{`a.`, []pathStep{
			{name: "a", quoted: `"a"`, rare: 1, index: -1, named: 1},
			{name: "", quoted: `""`, rare: 0, index: -1, named: 1},
		}},
		{`a\`, []pathStep{{name: "a", quoted: `"a"`, rare: 1, index: -1, named: 1}}},
		{`a\\`, []pathStep{{name: `a\`, quoted: `"a\"`, rare: 2, index: -1, named: 1}}},
		{"order_id", []pathStep{{name: "order_id", quoted: `"order_id"`, rare: 6, index: -1, named: 1}}},
	} {
		got := parsePath(tc.path)
		if len(got) != len(tc.want) {
			t.Errorf("%s: %+v, want %+v", tc.path, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%s step %d: %+v, want %+v", tc.path, i, got[i], tc.want[i])
			}
		}
	}
}

// TestUnescapedIs pins the name comparison to gjson's unescaping.
func TestUnescapedIs(t *testing.T) {
	for _, tc := range []struct {
		raw, want string
		is        bool
	}{
		{`\u0069d`, "id", true},
		{`i\"d`, `i"d`, true},
		{`a\/b\\c`, `a/b\c`, true},
		{`\n\t\r\b\f`, "\n\t\r\b\f", true},
		{`\u00e9`, "é", true},
		{`\ud83d\ude00`, "\U0001F600", true},
		{`a\ud800`, "a\uFFFD", true},
		{`a\ud800\u0041`, "a\uFFFD", true}, // gjson takes the next escape with a lone surrogate
		{`a\q`, "a", true},                 // an invalid escape ends the text
		{`a\u12`, "a", true},
		{"a\x01b", "a", true},
		{`\u0069d`, "i", false},
		{`\u0069d`, "idx", false},
		{`i\"d`, `i\"d`, false},
	} {
		if got := unescapedIs(tc.raw, tc.want); got != tc.is {
			t.Errorf("unescapedIs(%q, %q) = %v, want %v", tc.raw, tc.want, got, tc.is)
		}
	}
}

func TestNamesUnescaped(t *testing.T) {
	for _, tc := range []struct {
		doc  string
		want bool
	}{
		{`{"a":"b"}`, true},
		{`{"a":"\u00e9","b":["\"x\":"]}`, true},
		{`{"a":"x\\","b":1}`, true},
		{`{"\u0061":1}`, false},
		{`{"a\"b" :1}`, false},
		{`{"a":"x\\":1}`, false}, // not JSON: taken as a name, so the scan decides
		{`{"a":"\`, false},
	} {
		if got := namesUnescaped(tc.doc); got != tc.want {
			t.Errorf("namesUnescaped(%s) = %v, want %v", tc.doc, got, tc.want)
		}
	}
}

// TestPathScanSafeOnGarbage: the scan terminates and does not panic on
// values that are not JSON (lazy validation hands it those).
func TestPathScanSafeOnGarbage(t *testing.T) {
	steps := parsePath("a.0.b")
	for _, v := range []string{
		``, `{`, `[`, `{"a"`, `{"a":`, `{"a":[`, `{"a":[}`, `{"a":[,,]`, `{"a":["x`, `{"a":[{"b`,
		`{"a\`, `{"a":[{"b":1,"b"`, `]]]`, `{"a":[}}}}`, `{"a":[1 2 3]}`, `{"a":[{}}]}`,
		`{"a":[{"b":1},"b":2]}`, `{"a":[{"b":"\"}`, strings.Repeat(`{"a":[`, 1000),
	} {
		_ = pathScan(v, steps)
		_ = pathReason(v, steps)
	}
}
