package fetcher

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/segmentio/kafka-go/compress"
	kgzip "github.com/segmentio/kafka-go/compress/gzip"
	klz4 "github.com/segmentio/kafka-go/compress/lz4"
	ksnappy "github.com/segmentio/kafka-go/compress/snappy"
	kzstd "github.com/segmentio/kafka-go/compress/zstd"
)

// TestDecompressRoundTrip: what kafka-go's codecs write (snappy framed
// and unframed, as the Java client and librdkafka write it) decompresses
// to the original, up to the bound and across several xerial frames.
func TestDecompressRoundTrip(t *testing.T) {
	plain := bytes.Repeat([]byte(`{"order_id":"o-123456","amount":42}`), 4000) // ~140 KB: several xerial frames
	for _, tc := range []struct {
		codec compress.Compression
		c     compress.Codec
	}{
		{compress.Gzip, &kgzip.Codec{Level: 6}},
		{compress.Snappy, &ksnappy.Codec{Framing: ksnappy.Framed}},
		{compress.Snappy, &ksnappy.Codec{Framing: ksnappy.Unframed}},
		{compress.Lz4, &klz4.Codec{}},
		{compress.Zstd, &kzstd.Codec{Level: 3}},
	} {
		var buf bytes.Buffer
		w := tc.c.NewWriter(&buf)
		if _, err := w.Write(plain); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		got, err := decompress(tc.codec, buf.Bytes())
		if err != nil || !bytes.Equal(got, plain) {
			t.Fatalf("%s (%d compressed bytes): %d bytes, err %v; want %d bytes", tc.codec, buf.Len(), len(got), err, len(plain))
		}
	}
}

// TestDecompressBombs: batches that declare or expand to more than the
// bound fail with errInflated, without allocating what they declare.
func TestDecompressBombs(t *testing.T) {
	xerial := func(blocks ...[]byte) []byte {
		b := append(append([]byte{}, xerialMagic...), 0, 0, 0, 1, 0, 0, 0, 1)
		for _, blk := range blocks {
			b = binary.BigEndian.AppendUint32(b, uint32(len(blk)))
			b = append(b, blk...)
		}
		return b
	}
	// A snappy block is its decoded length as a uvarint, then its
	// elements: this one claims 4 GiB and holds nothing.
	hugeBlock := binary.AppendUvarint(nil, 1<<32-1)
	// Zeros compress ~20000:1 with zstd: 64 MiB to a few KB, beyond the
	// 16 MiB floor and 1024 times the compressed size.
	zeros := make([]byte, 64<<20)
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	zbomb := enc.EncodeAll(zeros, nil)
	var gz bytes.Buffer
	w := (&kgzip.Codec{Level: 9}).NewWriter(&gz)
	w.Write(zeros)
	w.Close()
	// Two frames, the second declaring more than the bound leaves after
	// the first (snappy itself expands ~21 times at most: only declared
	// lengths can go beyond the bound).
	first := snappy.Encode(nil, zeros[:12<<20])
	second := binary.AppendUvarint(nil, 8<<20)
	for _, tc := range []struct {
		name  string
		codec compress.Compression
		src   []byte
	}{
		{"unframed snappy declaring 4 GiB", compress.Snappy, hugeBlock},
		{"xerial frame declaring 4 GiB", compress.Snappy, xerial(hugeBlock)},
		{"zstd of 64 MiB of zeros", compress.Zstd, zbomb},
		{"gzip of 64 MiB of zeros", compress.Gzip, gz.Bytes()},
	} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := decompress(tc.codec, tc.src)
		runtime.ReadMemStats(&after)
		if !errors.Is(err, errInflated) {
			t.Fatalf("%s (%d bytes): err %v, want errInflated", tc.name, len(tc.src), err)
		}
		// The output buffer doubles up to the bound and once beyond it
		// (~4 times the bound, at most 67 MiB here, in all), a zstd
		// decoder's first use adds its window; the snappy batches
		// declare 4 GiB.
		if alloc, limit := after.TotalAlloc-before.TotalAlloc, decompressLimit(len(tc.src)); alloc > 256<<20 {
			t.Fatalf("%s: %d bytes allocated (bound %d)", tc.name, alloc, limit)
		}
	}
	// The bound holds over the frames together (decodeSnappy with the
	// floor as the bound: real snappy data stays far below the ratio).
	if _, err := decodeSnappy(xerial(first, second), decompressFloor); !errors.Is(err, errInflated) {
		t.Fatalf("xerial frames beyond the bound together: err %v, want errInflated", err)
	}
	// A xerial frame longer than what follows it is an error, not a read
	// beyond the batch.
	cut := xerial(snappy.Encode(nil, []byte("abc")))
	binary.BigEndian.PutUint32(cut[16:], 1000)
	if _, err := decompress(compress.Snappy, cut); err == nil {
		t.Fatal("a xerial frame longer than the batch decoded")
	}
}

// zstdFrame compresses plain as kafka-go's writer does (a streamed frame:
// no declared content size).
func zstdFrame(t testing.TB, plain []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := (&kzstd.Codec{Level: 3}).NewWriter(&buf)
	if _, err := w.Write(plain); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestZstdOutputSizes: the output buffer is sized by the ratio of the
// batch before; batches that compress far better or worse than the one
// before (a short buffer grown, a long one left partly unused), with and
// without a declared size, decode to the original.
func TestZstdOutputSizes(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	noisy := make([]byte, 300<<10)
	for i := range noisy {
		noisy[i] = byte('a' + r.IntN(20))
	}
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, plain := range [][]byte{
		make([]byte, 2<<20), // ~5000:1
		noisy,               // ~1.6:1
		make([]byte, 1<<20),
		[]byte("x"),
		bytes.Repeat([]byte(`{"order_id":"o-123456","amount":42}`), 30000),
		noisy[:1000],
	} {
		for _, frame := range [][]byte{zstdFrame(t, plain), enc.EncodeAll(plain, nil)} {
			got, err := decompress(compress.Zstd, frame)
			if err != nil || !bytes.Equal(got, plain) {
				t.Fatalf("batch %d (%d compressed bytes): %d bytes, err %v; want %d", i, len(frame), len(got), err, len(plain))
			}
		}
	}
}

// TestZstdStreamedBomb: a streamed frame (no declared size) of 64 MiB of
// zeros fails with errInflated at the bound, having allocated about the
// bound, not what it expands to.
func TestZstdStreamedBomb(t *testing.T) {
	bomb := zstdFrame(t, make([]byte, 64<<20))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := decompress(compress.Zstd, bomb)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, errInflated) {
		t.Fatalf("%d bytes: err %v, want errInflated", len(bomb), err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 5*uint64(decompressLimit(len(bomb))) {
		t.Fatalf("%d bytes allocated for a bound of %d", alloc, decompressLimit(len(bomb)))
	}
}

// TestZstdAllocatesItsContent: a pooled decoder writes a batch into the
// pooled output and keeps no window of its own; after collections emptied
// the pools, a batch costs its output and a decoder's tables, not a
// history as large as the output as well.
func TestZstdAllocatesItsContent(t *testing.T) {
	if raceOn {
		t.Skip("under the race detector sync.Pool drops a share of what is put back at random: allocations are not the decoder's")
	}
	plain := lz4Plain()
	allocsPerBatch(t, compress.Zstd, zstdFrame(t, plain), plain, 64<<10, uint64(len(plain))+512<<10)
}
