package producer

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// compressible are records like a pipeline's: JSON events with a few
// varying fields.
func compressible(n int) []kafka.Message {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	out := make([]kafka.Message, n)
	for i := range out {
		out[i] = kafka.Message{
			Key:     []byte(fmt.Sprintf("order-%06d", i)),
			Value:   []byte(fmt.Sprintf(`{"order_id":"order-%06d","customer":"c-%03d","amount":%d.%02d,"currency":"EUR","status":"created"}`, i, i%97, i%500, i%100)),
			Headers: []kafka.Header{{Key: "origin", Value: []byte("checkout")}},
			Time:    base.Add(time.Duration(i) * time.Millisecond),
		}
	}
	return out
}

// TestCompressedRoundTrip: a batch written with each codec reads back as
// written (a franz-go consumer decompresses it), is smaller than the
// uncompressed batch, and its header says the codec.
func TestCompressedRoundTrip(t *testing.T) {
	c := cluster(t)
	p, err := New(Config{Transport: &kafka.Transport{}, Brokers: c.ListenAddrs()})
	if err != nil {
		t.Fatal(err)
	}
	msgs := compressible(500)
	var plain Batch
	for i := range msgs {
		plain.Append(&msgs[i])
	}
	plainSize := plain.WireSize()
	for part, codec := range []Codec{Gzip, Snappy, LZ4, Zstd} {
		t.Run(codec.String(), func(t *testing.T) {
			var b Batch
			b.SetCodec(codec)
			for i := range msgs {
				b.Append(&msgs[i])
			}
			if got := b.encoded()[sizePrefix+offAttributes+1] & 7; Codec(got) != codec {
				t.Fatalf("attributes say codec %d", got)
			}
			if b.WireSize() >= plainSize/3 {
				t.Errorf("%s batch %d bytes, uncompressed %d", codec, b.WireSize(), plainSize)
			}
			if b.Size() != plain.Size() {
				t.Errorf("Size %d, want the uncompressed %d (the bound batches are cut by)", b.Size(), plain.Size())
			}
			topicPart := part % 2
			before := readCount(t, c.ListenAddrs(), topicPart)
			if _, err := p.Produce(context.Background(), "out", topicPart, &b); err != nil {
				t.Fatal(err)
			}
			got := readAll(t, c.ListenAddrs(), "out", int32(topicPart), before+len(msgs))[before:]
			for i, r := range got {
				m := msgs[i]
				if !bytes.Equal(r.Key, m.Key) || !bytes.Equal(r.Value, m.Value) || r.Timestamp.UnixMilli() != m.Time.UnixMilli() ||
					len(r.Headers) != 1 || string(r.Headers[0].Value) != "checkout" {
					t.Fatalf("record %d: key %q value %q", i, r.Key, r.Value)
				}
			}
		})
	}
}

// readCount is how many records partition p of "out" holds.
func readCount(t *testing.T, brokers []string, p int) int {
	t.Helper()
	conn, err := kafka.DialLeader(context.Background(), "tcp", brokers[0], "out", p)
	if err != nil {
		// Not the leader's address: ask through any broker.
		for _, b := range brokers[1:] {
			if conn, err = kafka.DialLeader(context.Background(), "tcp", b, "out", p); err == nil {
				break
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	defer conn.Close()
	last, err := conn.ReadLastOffset()
	if err != nil {
		t.Fatal(err)
	}
	return int(last)
}

// TestIncompressibleSentPlain: a batch that does not shrink is sent
// uncompressed.
func TestIncompressibleSentPlain(t *testing.T) {
	var b Batch
	b.SetCodec(Snappy)
	v := make([]byte, 4096)
	x := uint64(1)
	for i := range v {
		x = x*6364136223846793005 + 1442695040888963407
		v[i] = byte(x >> 56)
	}
	b.Append(&kafka.Message{Value: v})
	enc := b.encoded()
	if enc[sizePrefix+offAttributes+1]&7 != 0 || b.WireSize() != int(b.Size()) {
		t.Fatalf("attributes %#x, wire %d, size %d", enc[sizePrefix+offAttributes+1], b.WireSize(), b.Size())
	}
	if n := binary.BigEndian.Uint32(enc); int(n) != len(enc)-sizePrefix {
		t.Fatalf("size prefix %d for %d bytes", n, len(enc)-sizePrefix)
	}
}

// TestCompressedReuseAllocations: a pooled batch compressed again and
// again allocates (almost) nothing: the encoders are pooled.
func TestCompressedReuseAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items at random: allocation counts mean nothing under it (make test runs this test again without -race)")
	}
	msgs := compressible(200)
	for _, codec := range []Codec{Gzip, Snappy, LZ4, Zstd} {
		var b Batch
		b.SetCodec(codec)
		fill := func() {
			b.Reset()
			for i := range msgs {
				b.Append(&msgs[i])
			}
			b.encoded()
		}
		fill()
		fill()
		n := testing.AllocsPerRun(50, fill)
		t.Logf("%s: %v allocations per batch, %d bytes from %d", codec, n, b.WireSize(), b.Size())
		if n > 1 {
			t.Errorf("%s: %v allocations per batch", codec, n)
		}
	}
}

func TestParseCodec(t *testing.T) {
	for _, c := range []Codec{None, Gzip, Snappy, LZ4, Zstd} {
		if got, err := ParseCodec(c.String()); err != nil || got != c {
			t.Errorf("%s: %v %v", c, got, err)
		}
	}
	if _, err := ParseCodec("brotli"); err == nil {
		t.Error("brotli accepted")
	}
}
