package keys

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/segmentio/kafka-go"
)

// FuzzExtractJSON: any value and path, no panic; an error leaves dst alone
// and carries a known reason; a key is never larger than the maximum.
func FuzzExtractJSON(f *testing.F) {
	f.Add([]byte(sampleOrder), "order_id", "none")
	f.Add([]byte(`{"a":{"b":"\u00e9"}}`), "a.b", "lower")
	f.Add([]byte(`{"a":1e400}`), "a", "trim")
	f.Add([]byte(`{"a":"http://X.com:80/../a?b&a"}`), "a", "url")
	f.Add([]byte(`[1,2,{"a":"x"}]`), "2.a", "none")
	f.Add([]byte(`{"a":"\ud800"}`), "a", "lower")
	f.Add([]byte("{\"a\":\"\xff\"}"), "a", "trim")
	f.Add([]byte(`{"a":`), "a", "none")
	known := map[string]bool{}
	for _, r := range Reasons() {
		known[r] = true
	}
	f.Fuzz(func(t *testing.T, value []byte, path, norm string) {
		if _, err := ParseNormalize(norm); err != nil {
			norm = "none"
		}
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
