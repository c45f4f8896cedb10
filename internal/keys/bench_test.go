package keys

import (
	"testing"

	"github.com/segmentio/kafka-go"
	"github.com/tidwall/gjson"
)

func benchExtract(b *testing.B, spec, norm string, key, value []byte, hs []kafka.Header) {
	e, err := NewExtractor(spec, norm, 0)
	if err != nil {
		b.Fatal(err)
	}
	loopExtract(b, e, key, value, hs)
}

// loopExtract reports cpu-ns/op too: on a shared machine it is the figure
// to compare (see BenchmarkNormalizeURL).
func loopExtract(b *testing.B, e *Extractor, key, value []byte, hs []kafka.Header) {
	dst := make([]byte, 0, 256)
	b.ReportAllocs()
	b.SetBytes(int64(len(value)))
	report, ops := reportCPUPerOp(b), 0
	for b.Loop() {
		if _, err := e.Extract(dst[:0], key, value, hs); err != nil {
			b.Fatal(err)
		}
		ops++
	}
	report(ops)
}

func BenchmarkExtract(b *testing.B) {
	value := []byte(sampleOrder)
	key := []byte("ORD-0000123456")
	hs := []kafka.Header{{Key: "trace", Value: []byte("t")}, {Key: "id", Value: []byte("abc")}}
	url := []byte(`{"url":"HTTPS://Shop.Example.COM:443/products/./42?size=m&color=red#top","depth":3}`)
	b.Run("key/none", func(b *testing.B) { benchExtract(b, "key", "none", key, value, nil) })
	b.Run("key/lower", func(b *testing.B) { benchExtract(b, "key", "lower", key, value, nil) })
	b.Run("header/none", func(b *testing.B) { benchExtract(b, "header:id", "none", key, value, hs) })
	b.Run("json/none", func(b *testing.B) { benchExtract(b, "json:order_id", "none", key, value, nil) })
	b.Run("json-lazy/none", func(b *testing.B) {
		e, _ := NewExtractor("json:order_id", "none", 0, LazyJSONValidation())
		loopExtract(b, e, key, value, nil)
	})
	b.Run("json-nested/none", func(b *testing.B) { benchExtract(b, "json:customer.id", "none", key, value, nil) })
	b.Run("json-compound/none", func(b *testing.B) { benchExtract(b, "json:customer.id,json:order_id", "none", key, value, nil) })
	// A value with escapes (as Python's json.dumps writes non-ASCII text)
	// takes the duplicate check's scan instead of its quick test.
	escaped := []byte(sampleOrderEscaped)
	b.Run("json-escaped/none", func(b *testing.B) { benchExtract(b, "json:order_id", "none", key, escaped, nil) })
	b.Run("json-escaped-nested/none", func(b *testing.B) { benchExtract(b, "json:customer.id", "none", key, escaped, nil) })
	b.Run("json/url", func(b *testing.B) { benchExtract(b, "json:url", "url", key, url, nil) })
	b.Run("json/url-all-rules", func(b *testing.B) {
		r, err := ParseURLRules(URLRuleNames(), []string{"ref"})
		if err != nil {
			b.Fatal(err)
		}
		e, err := NewExtractor("json:url", "url", 0, WithURLRules(r))
		if err != nil {
			b.Fatal(err)
		}
		loopExtract(b, e, key, url, nil)
	})
}

// BenchmarkJSONValidation isolates the cost of validating the whole value
// next to the cost of locating the field.
func BenchmarkJSONValidation(b *testing.B) {
	value := []byte(sampleOrder)
	b.Run("ValidBytes", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(value)))
		for b.Loop() {
			if !gjson.ValidBytes(value) {
				b.Fatal("invalid")
			}
		}
	})
	b.Run("Get", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(value)))
		for b.Loop() {
			if r := gjson.Get(bytesToString(value), "order_id"); !r.Exists() {
				b.Fatal("missing")
			}
		}
	})
	b.Run("GetBytes", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(value)))
		for b.Loop() {
			if r := gjson.GetBytes(value, "order_id"); !r.Exists() {
				b.Fatal("missing")
			}
		}
	})
}

// benchURLs are typical crawler URLs. Every one is one the net/url based
// canonicalizer also accepted, so figures before and after the lenient
// parser compare like with like.
var benchURLs = []struct{ name, url string }{
	{"plain", "https://www.example.com/products/42"},
	{"query", "https://shop.example.com/search?q=red+shoes&page=2&sort=price"},
	{"messy", "HTTPS://Shop.Example.COM:443/a/./b/../%7eitem%2fx?size=m&color=red&&ref=#top"},
	{"idn", "http://B\u00fccher.example/caf\u00e9?x=1"},
	{"ipv6", "http://[2001:DB8::0001]:8080/status"},
	{"long", "https://cdn.example.org/assets/v1/images/2024/03/15/" +
		"very-long-file-name-with-many-words-in-it.jpg?w=1200&h=800&fit=crop&auto=format&q=75&utm_source=feed"},
}

// BenchmarkNormalizeURL measures the canonical form of typical crawler URLs
// alone, without key extraction.
func BenchmarkNormalizeURL(b *testing.B) {
	for _, bc := range benchURLs {
		b.Run(bc.name, func(b *testing.B) {
			dst := make([]byte, 0, 256)
			b.ReportAllocs()
			b.SetBytes(int64(len(bc.url)))
			report, ops := reportCPUPerOp(b), 0
			for b.Loop() {
				if _, err := NormalizeURL(dst[:0], bc.url); err != nil {
					b.Fatal(err)
				}
				ops++
			}
			report(ops)
		})
	}
}

// BenchmarkURLRules measures the same URLs side by side with no rule and
// with every rule on (and the built-in tracking list plus two operator
// patterns), in one run:
//
//	go test -run '^$' -bench URLRules -count 6 ./internal/keys | benchstat -col /rules -
func BenchmarkURLRules(b *testing.B) {
	all, err := ParseURLRules(URLRuleNames(), []string{"ref", "*_ref"})
	if err != nil {
		b.Fatal(err)
	}
	urls := append(benchURLs[:len(benchURLs):len(benchURLs)], struct{ name, url string }{"tracked",
		"https://www.shop.example.com/products/42/?utm_source=news&utm_medium=email&id=7&fbclid=IwAR2x&PHPSESSID=cdc993a493e899bed04f4d0c8a462a03"})
	for _, bc := range urls {
		for _, rc := range []struct {
			name  string
			rules *URLRules
		}{{"none", nil}, {"all", all}} {
			b.Run("url="+bc.name+"/rules="+rc.name, func(b *testing.B) {
				dst := make([]byte, 0, 256)
				b.ReportAllocs()
				b.SetBytes(int64(len(bc.url)))
				report, ops := reportCPUPerOp(b), 0
				for b.Loop() {
					if _, err := NormalizeURLRules(dst[:0], bc.url, rc.rules); err != nil {
						b.Fatal(err)
					}
					ops++
				}
				report(ops)
			})
		}
	}
}
