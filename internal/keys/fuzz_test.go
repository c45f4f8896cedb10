package keys

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/segmentio/kafka-go"
	"github.com/tidwall/gjson"
)

// FuzzExtractJSON: any value and path, no panic; an error leaves dst alone
// and carries a known reason; a key is never larger than the maximum; and
// the key field means one thing (checkKeyFieldMeansOneThing).
func FuzzExtractJSON(f *testing.F) {
	f.Add([]byte(sampleOrder), "order_id", "none")
	f.Add([]byte(`{"a":{"b":"\u00e9"}}`), "a.b", "lower")
	f.Add([]byte(`{"a":1e400}`), "a", "trim")
	f.Add([]byte(`{"a":"http://X.com:80/../a?b&a"}`), "a", "url")
	f.Add([]byte(`[1,2,{"a":"x"}]`), "2.a", "none")
	f.Add([]byte(`{"a":"\ud800"}`), "a", "lower")
	f.Add([]byte("{\"a\":\"\xff\"}"), "a", "trim")
	f.Add([]byte(`{"a":`), "a", "none")
	f.Add([]byte(`{"a":"X1","a":"Y1"}`), "a", "none")
	f.Add([]byte(`{"a":{"b":1},"a":{"b":2}}`), "a.b", "none")
	f.Add([]byte(`{"a":[{"b":1,"c":{"b":2,"b":3}},{"b":1,"b":2}]}`), "a.1.b", "none")
	f.Add([]byte(`{"b":1,"a":{"b":2},"x":3,"x":4}`), "a.b", "none")
	f.Add([]byte(`{"id":"X","\u0069d":"Y"}`), "id", "none")
	f.Add([]byte(`{"n":"Jos\u00e9","id":"X","id":"Y"}`), "id", "none")
	f.Add([]byte(`{"a":"S\ud800\u0041","b":"\ud83d\ude00"}`), "a", "none")
	known := map[string]bool{}
	for _, r := range Reasons() {
		known[r] = true
	}
	f.Fuzz(func(t *testing.T, value []byte, path, norm string) {
		if _, err := ParseNormalize(norm); err != nil {
			norm = "none"
		}
		checkKeyFieldMeansOneThing(t, value, path)
		e, err := NewExtractor("json:"+path+",key", norm, 64)
		if err != nil {
			return
		}
		dst := []byte("pre")
		out, err := e.Extract(dst, []byte("k"), value, []kafka.Header{{Key: "h", Value: value}})
		if err != nil {
			if !known[ReasonOf(err)] {
				t.Fatalf("unknown reason in %v", err)
			}
			if string(out) != "pre" {
				t.Fatalf("dst changed on error")
			}
			return
		}
		if len(out)-3 > 64 {
			t.Fatalf("key of %d bytes exceeds the maximum", len(out)-3)
		}
		if norm != "none" && !utf8.Valid(out[3:]) && !strings.Contains(string(out), "\x00") {
			// compound prefixes contain zero bytes; only single parts are text
			t.Fatalf("textual normalization produced invalid UTF-8: %q", out)
		}
	})
}

// FuzzNormalizeURL: no panic, and the canonical form is a fixed point.
func FuzzNormalizeURL(f *testing.F) {
	for _, s := range []string{
		"http://example.com", "HTTP://Example.COM:80/a/./b/../c?b=2&a=1#f",
		"https://u:p@[::1]:443/%7e?x=%zz", "http://B\u00fccher.example/caf\u00e9",
		"http://a.com/..//x/?&&=&a", "http://a.com/%2e%2E/%2F?q=+%2b",
		"ws://a.b.c.:0080/?", "http://a.com/;p?q=1;2",
		"http://foo.com/\x01!", "http://www.example.com/p%zz%77%v", "https://example%2Ecom/",
		"\thttp:\\\\a.com\\b\\..\\c\n", "http:a.com", "http://:@a.com/%2F%20b", "http://%C3%BC.com/#%zz",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out, err := NormalizeURL([]byte("pre"), in)
		if err != nil {
			if string(out) != "pre" {
				t.Fatalf("dst changed on error")
			}
			return
		}
		once := string(out[3:])
		twice, err := NormalizeURL(nil, once)
		if err != nil {
			t.Fatalf("NormalizeURL(%q) = %q, which does not normalize again: %v", in, once, err)
		}
		if string(twice) != once {
			t.Fatalf("not idempotent:\n in    %q\n once  %q\n twice %q", in, once, twice)
		}
	})
}

// FuzzNormalizeURLRules: any URL under any set of rules and stripped
// parameters: no panic; an error exactly where NormalizeURL errs; the
// result is a fixed point under the same rules, and already in the safe
// canonical form (the rules only remove or fold).
func FuzzNormalizeURLRules(f *testing.F) {
	for _, s := range []string{
		"http://u:p@www.www2.example.com/a;jsessionid=x/index.html/?utm_source=1&cfid=1&cftoken=2&b=&sid=9682993c8daa2c5497996114facdc805",
		"HTTPS://WWW.Example.com:443//a//b/?&=1&fbclid=x", "https://www.example.com/", "http://www.com/a", "ftp://u@www.a.b//x/",
		"http://e.com/.;jsessionid=1/x", "http://e.com/index.html/index.php", "http://e.com/a?x=1&CFTOKEN=a&y&CFID=b",
	} {
		f.Add(s, uint16(0xffff), "ref,*_id")
		f.Add(s, uint16(presetCrawlerMask()), "")
	}
	f.Fuzz(func(t *testing.T, in string, mask uint16, params string) {
		var names []string
		for _, x := range urlRuleNames {
			if URLRule(mask)&x.rule != 0 {
				names = append(names, x.name)
			}
		}
		r, err := ParseURLRules(names, strings.Split(params, ","))
		if err != nil {
			r, _ = ParseURLRules(names, nil)
		}
		safe, errSafe := NormalizeURL(nil, in)
		out, err := NormalizeURLRules([]byte("pre"), in, r)
		if (err != nil) != (errSafe != nil) {
			t.Fatalf("%q: error %v with rules %q, %v without", in, err, r.Names(), errSafe)
		}
		if err != nil {
			if string(out) != "pre" {
				t.Fatalf("dst changed on error")
			}
			return
		}
		once := string(out[3:])
		twice, err := NormalizeURLRules(nil, once, r)
		if err != nil || string(twice) != once {
			t.Fatalf("rules %q params %q not idempotent:\n in    %q\n once  %q\n twice %q, %v", r.Names(), r.StripParams(), in, once, twice, err)
		}
		if s, err := NormalizeURL(nil, once); err != nil || string(s) != once {
			t.Fatalf("rules %q: %q → %q is not in the safe form (%q, %v); safe form of the input %q", r.Names(), in, once, s, err, safe)
		}
	})
}

// FuzzExtract: arbitrary specs, headers, keys and values never panic, and
// the error contract holds.
func FuzzExtract(f *testing.F) {
	f.Add("header:id,key", "id", []byte("h"), []byte("k"), []byte(`{}`), "lower")
	f.Add("json:a.b,header:x", "x", []byte(""), []byte(nil), []byte(`{"a":{"b":1}}`), "trim")
	f.Add("key", "", []byte(nil), []byte("\xff"), []byte(nil), "url")
	known := map[string]bool{}
	for _, r := range Reasons() {
		known[r] = true
	}
	f.Fuzz(func(t *testing.T, spec, hname string, hval, key, value []byte, norm string) {
		e, err := NewExtractor(spec, norm, 128)
		if err != nil {
			return
		}
		out, err := e.Extract([]byte("pre"), key, value, []kafka.Header{{Key: hname, Value: hval}})
		if err != nil {
			if !known[ReasonOf(err)] || string(out) != "pre" {
				t.Fatalf("bad error contract: %v, %q", err, out)
			}
			return
		}
		if len(out) == 3 || len(out)-3 > 128 {
			t.Fatalf("key of %d bytes", len(out)-3)
		}
	})
}

// checkKeyFieldMeansOneThing holds the json: key to what readers that keep
// the last duplicate (Go's encoding/json, JavaScript) read, for values
// both validators accept and plain paths: a keyed record has no duplicate
// on the path and the key is the value they read; duplicate_key_field is
// reported only for a duplicate they see; a string keyed has no lone
// surrogate escape (checked on UTF-16 code units, as JavaScript reads it);
// and the quick test of pathReason never hides what pathScan finds.
func checkKeyFieldMeansOneThing(t *testing.T, value []byte, path string) {
	e, err := NewExtractor("json:"+path, "none", 1<<20)
	if err != nil {
		return
	}
	doc := string(value)
	got, err := e.Extract(nil, nil, value, nil)
	r := gjson.Get(doc, path)
	if !gjson.Valid(doc) {
		return
	}
	if r.Exists() {
		if scan := pathScan(doc, e.parts[0].steps); scan != "" && pathReason(doc, e.parts[0].steps) != scan {
			t.Fatalf("pathReason hides %s that pathScan finds in %s", scan, doc)
		}
	}
	if err == nil && r.Type == gjson.String && !wellFormedUTF16(r.Raw) {
		t.Fatalf("keyed %q from a string with a lone surrogate: %s", got, r.Raw)
	}
	if !json.Valid(value) || !utf8.Valid(value) || !plainPath.MatchString(path) ||
		strings.Contains(strings.ToLower(doc), `\ud`) {
		return // other readers decode these differently anyway
	}
	steps := strings.Split(path, ".")
	dup := duplicateOnPath(json.NewDecoder(bytes.NewReader(value)), steps)
	reason := ReasonOf(err)
	switch {
	case err == nil && dup:
		t.Fatalf("keyed %q though a member on the path %s is twice in %s", got, path, doc)
	case err == nil:
		if want, ok := lastReading(value, steps); !ok || want != string(got) {
			t.Fatalf("keyed %q, encoding/json reads %q (%v) at %s in %s", got, want, ok, path, doc)
		}
	case reason == ReasonDuplicateKeyField && !dup:
		t.Fatalf("duplicate_key_field without a duplicate on %s in %s", path, doc)
	case dup && reason != ReasonDuplicateKeyField && reason != ReasonMissing:
		t.Fatalf("duplicate on %s in %s reported as %s", path, doc, reason)
	}
}

var plainPath = regexp.MustCompile(`^[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*$`)

// duplicateOnPath reads the next value from dec with encoding/json's
// tokenizer and reports whether an object on steps holds its step's member
// twice, following the first member of a name.
func duplicateOnPath(dec *json.Decoder, steps []string) bool {
	tok, err := dec.Token()
	if err != nil {
		return false
	}
	delim, ok := tok.(json.Delim)
	if !ok {
		return false
	}
	found := false
	for n := 0; dec.More(); n++ {
		match := false
		if delim == '{' {
			k, err := dec.Token()
			if err != nil {
				return false
			}
			match = k.(string) == steps[0]
			if match && found {
				return true
			}
		} else {
			i, err := strconv.Atoi(steps[0])
			match = err == nil && i == n
		}
		if match && !found && len(steps) > 1 {
			found = true
			if duplicateOnPath(dec, steps[1:]) {
				return true
			}
			continue
		}
		found = found || match
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return false
		}
	}
	_, _ = dec.Token()
	return false
}

// lastReading is the text encoding/json reads at steps (the last of
// duplicate members): a string's text, a number or boolean as written.
func lastReading(value []byte, steps []string) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(value))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return "", false
	}
	for _, s := range steps {
		switch c := v.(type) {
		case map[string]any:
			if v = c[s]; v == nil {
				return "", false
			}
		case []any:
			i, err := strconv.Atoi(s)
			if err != nil || i >= len(c) {
				return "", false
			}
			v = c[i]
		default:
			return "", false
		}
	}
	switch s := v.(type) {
	case string:
		return s, true
	case json.Number:
		return string(s), true
	case bool:
		return strconv.FormatBool(s), true
	}
	return "", false
}

// wellFormedUTF16 decodes the JSON string raw (with its quotes, escapes as
// written) into UTF-16 code units as JavaScript does and reports whether
// every surrogate is half of a pair.
func wellFormedUTF16(raw string) bool {
	var units []uint16
	s := raw[1 : len(raw)-1]
	for i := 0; i < len(s); {
		if s[i] == '\\' && i+1 < len(s) && s[i+1] == 'u' && i+6 <= len(s) {
			n, err := strconv.ParseUint(s[i+2:i+6], 16, 16)
			if err == nil {
				units = append(units, uint16(n))
				i += 6
				continue
			}
		}
		if s[i] == '\\' {
			i += 2
			units = append(units, 'x')
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		units = utf16.AppendRune(units, r)
		i += size
	}
	for i := 0; i < len(units); i++ {
		switch u := units[i]; {
		case u >= 0xDC00 && u <= 0xDFFF:
			return false
		case u >= 0xD800 && u <= 0xDBFF:
			if i+1 >= len(units) || units[i+1] < 0xDC00 || units[i+1] > 0xDFFF {
				return false
			}
			i++
		}
	}
	return true
}
