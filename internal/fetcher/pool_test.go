package fetcher

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestSizeClass(t *testing.T) {
	prev := 0
	for i := 0; ; i++ {
		size := (4 + i%4) << (i / 4)
		if size < minPooled {
			continue
		}
		if size > maxPooled {
			break
		}
		if i >= numClasses {
			t.Fatalf("class %d (size %d) beyond numClasses %d", i, size, numClasses)
		}
		for _, n := range []int{prev + 1, size - 1, size} {
			if n < minPooled {
				continue
			}
			gi, gs := sizeClass(n)
			if gi != i || gs != size {
				t.Fatalf("sizeClass(%d) = %d, %d; want %d, %d", n, gi, gs, i, size)
			}
		}
		if prev > 0 && size > prev*5/4 {
			t.Fatalf("class %d: %d after %d: more than a quarter apart", i, size, prev)
		}
		prev = size
	}
	if i, s := sizeClass(1); s != minPooled || i != 0 && (4+i%4)<<(i/4) != minPooled {
		t.Fatalf("sizeClass(1) = %d, %d; want the class of %d", i, s, minPooled)
	}
}

func TestSlicePool(t *testing.T) {
	var p slicePool[byte]
	s := p.get(1000)
	if len(s) != 1000 || cap(s) != 1024 {
		t.Fatalf("get(1000): len %d cap %d, want 1000 1024", len(s), cap(s))
	}
	s[0] = 7
	p.put(s)
	// sync.Pool may drop what it is given (it does at random under the
	// race detector), so only what comes back is checked.
	if r := p.get(900); cap(r) != 1024 || len(r) != 900 {
		t.Fatalf("get(900): len %d cap %d, want 900 1024", len(r), cap(r))
	}
	p.put(make([]byte, 10, 1000)) // not a class size: dropped, no panic
	if big := p.get(maxPooled + 1); len(big) != maxPooled+1 {
		t.Fatalf("get beyond maxPooled: len %d", len(big))
	}
}

// TestReleaseReusesAndPoisons: a released chunk's records are cleared, its
// bytes (the fetched set, or a compressed batch's decompressed bytes) go
// back to the pool, overwritten under the race detector, copies of the
// chunk release once, and later fetches read their own records whatever
// the earlier chunks' buffers hold now.
func TestReleaseReusesAndPoisons(t *testing.T) {
	for name, codec := range map[string]kgo.CompressionCodec{"none": kgo.NoCompression(), "snappy": kgo.SnappyCompression(),
		"zstd": kgo.ZstdCompression(), "gzip": kgo.GzipCompression(), "lz4": kgo.Lz4Compression()} {
		t.Run(name, func(t *testing.T) {
			brokers := newCluster(t)
			cl := producer(t, brokers, kgo.ProducerBatchCompression(codec))
			var recs []*kgo.Record
			for i := range 200 {
				recs = append(recs, rec(fmt.Sprintf("v%03d", i)))
			}
			produce(t, cl, recs...)
			p, err := New(Config{Transport: &kafka.Transport{}, Brokers: brokers, Topic: topic,
				MaxBytes: 1 << 10, MaxWait: 50 * time.Millisecond}, 0)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for p.Offset() < 200 {
				c, err := p.Fetch(context.Background())
				if err != nil {
					t.Fatalf("fetch at %d: %v", p.Offset(), err)
				}
				for _, m := range c.Records {
					got = append(got, string(m.Value)) // a copy, before Release
				}
				var value []byte
				if len(c.Records) > 0 {
					value = c.Records[0].Value
				}
				recsOf := c.Records
				cp := c
				c.Release()
				cp.Release() // the copy shares what was released: nothing twice
				for i, m := range recsOf {
					if m.Value != nil || m.Offset != 0 {
						t.Fatalf("record %d of a released chunk not cleared: %+v", i, m)
					}
				}
				if poisonReleased && len(value) > 0 && !bytes.Equal(value, bytes.Repeat([]byte{0xA5}, len(value))) {
					t.Fatalf("a released value reads %q, want it overwritten (race build)", value)
				}
			}
			if len(got) != 200 {
				t.Fatalf("read %d records, want 200", len(got))
			}
			for i, v := range got {
				if want := fmt.Sprintf("v%03d", i); v != want {
					t.Fatalf("record %d: %q, want %q", i, v, want)
				}
			}
		})
	}
}
