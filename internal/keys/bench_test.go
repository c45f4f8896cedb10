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
	dst := make([]byte, 0, 256)
	b.ReportAllocs()
	b.SetBytes(int64(len(value)))
	for b.Loop() {
		if _, err := e.Extract(dst[:0], key, value, hs); err != nil {
			b.Fatal(err)
		}
	}
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
		dst := make([]byte, 0, 256)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := e.Extract(dst[:0], key, value, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json-nested/none", func(b *testing.B) { benchExtract(b, "json:customer.id", "none", key, value, nil) })
	b.Run("json-compound/none", func(b *testing.B) { benchExtract(b, "json:customer.id,json:order_id", "none", key, value, nil) })
	b.Run("json/url", func(b *testing.B) { benchExtract(b, "json:url", "url", key, url, nil) })
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
