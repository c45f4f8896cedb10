package fetcher

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/pierrec/lz4/v4"
	"github.com/segmentio/kafka-go/compress"
	klz4 "github.com/segmentio/kafka-go/compress/lz4"
)

// lz4Plain is the content of testdata/lz4/*.lz4 (554,010 bytes of
// order-like lines), written there by the lz4 command line tool 1.9.4
// (liblz4's frame encoder, as librdkafka uses it: linked blocks):
//
//	lz4 -BD -B4 -BX --content-size plain linked64k-sums.lz4
//	lz4 -BD -B5 --no-frame-crc plain linked256k.lz4
func lz4Plain() []byte {
	var b bytes.Buffer
	for i := range 8000 {
		fmt.Fprintf(&b, `{"order_id":"o-%d","amount":%d,"note":"%s"}`+"\n", i, i*7%1000, strings.Repeat("x", i%50))
	}
	return b.Bytes()
}

func lz4Encode(t *testing.T, plain []byte, opts ...lz4.Option) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := lz4.NewWriter(&buf)
	if err := w.Apply(opts...); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(plain); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestLZ4Frames: frames of every block size, with and without block and
// content checksums and a declared size, linked blocks (liblz4's), raw
// (incompressible) blocks, concatenated and skippable frames all decode
// to their content.
func TestLZ4Frames(t *testing.T) {
	plain := lz4Plain()
	if len(plain) != 554010 {
		t.Fatalf("content of %d bytes, want the 554,010 the testdata was made of", len(plain))
	}
	random := make([]byte, 300<<10)
	for i := range random {
		random[i] = byte(i*2654435761>>13) ^ byte(i>>7)
	}
	var kgo bytes.Buffer // kafka-go's codec: 4 MiB blocks
	w := (&klz4.Codec{}).NewWriter(&kgo)
	w.Write(plain)
	w.Close()
	cases := []struct {
		name  string
		frame []byte
		want  []byte
	}{
		{"kafka-go's codec", kgo.Bytes(), plain},
		{"64 KiB blocks", lz4Encode(t, plain, lz4.BlockSizeOption(lz4.Block64Kb)), plain},
		{"256 KiB blocks, block checksums", lz4Encode(t, plain, lz4.BlockSizeOption(lz4.Block256Kb), lz4.BlockChecksumOption(true)), plain},
		{"1 MiB blocks, no content checksum", lz4Encode(t, plain, lz4.BlockSizeOption(lz4.Block1Mb), lz4.ChecksumOption(false)), plain},
		{"declared size", lz4Encode(t, plain, lz4.SizeOption(uint64(len(plain)))), plain},
		{"incompressible (raw blocks)", lz4Encode(t, random, lz4.BlockSizeOption(lz4.Block64Kb)), random},
		{"empty", lz4Encode(t, nil), nil},
		{"two frames", append(lz4Encode(t, plain[:1000]), lz4Encode(t, plain[1000:])...), plain},
		{"a skippable frame between", append(append(lz4Encode(t, plain[:1000]), 0x5A, 0x2A, 0x4D, 0x18, 3, 0, 0, 0, 1, 2, 3), lz4Encode(t, plain[1000:])...), plain},
	}
	for _, f := range []string{"linked64k-sums.lz4", "linked256k.lz4"} {
		b, err := os.ReadFile("testdata/lz4/" + f)
		if err != nil {
			t.Fatal(err)
		}
		cases = append(cases, struct {
			name  string
			frame []byte
			want  []byte
		}{"liblz4 " + f, b, plain})
	}
	for _, tc := range cases {
		got, err := decompress(compress.Lz4, tc.frame)
		if err != nil || !bytes.Equal(got, tc.want) {
			t.Errorf("%s (%d bytes): %d bytes, err %v; want %d bytes", tc.name, len(tc.frame), len(got), err, len(tc.want))
		}
	}
}

// TestLZ4Broken: damaged frames are errors (never a panic or a read beyond
// the batch), and a frame expanding beyond the bound is errInflated.
func TestLZ4Broken(t *testing.T) {
	plain := lz4Plain()
	good := lz4Encode(t, plain, lz4.BlockSizeOption(lz4.Block64Kb))
	for cut := range len(good) {
		if cut%97 != 0 && cut > 64 {
			continue // every prefix up to the first block, then a sample
		}
		if _, err := decompress(compress.Lz4, good[:cut]); err == nil && cut > 0 {
			t.Fatalf("a frame cut to %d of %d bytes decoded", cut, len(good))
		}
	}
	// A flipped byte is an error or other content (a flipped literal: for
	// the batch's CRC-32C to catch), never a panic or a longer output.
	for i := 7; i < len(good); i += 211 {
		bad := bytes.Clone(good)
		bad[i] ^= 0x5A
		if got, err := decompress(compress.Lz4, bad); err == nil && len(got) > len(plain)+(64<<10) {
			t.Fatalf("byte %d flipped: %d bytes decoded from a frame of %d", i, len(got), len(plain))
		}
	}
	bad := bytes.Clone(good)
	bad[0] ^= 1
	if _, err := decompress(compress.Lz4, bad); err == nil || !strings.Contains(err.Error(), "magic") {
		t.Errorf("bad magic: err %v", err)
	}
	// LZ4 expands 255 times at most, below decompress's ratio: the bound
	// is reached only through its floor, as here.
	zeros := lz4Encode(t, make([]byte, 40<<20), lz4.BlockSizeOption(lz4.Block4Mb))
	if _, err := decodeLZ4(zeros, decompressFloor); !errors.Is(err, errInflated) {
		t.Errorf("40 MiB of zeros in %d bytes, bound %d: err %v, want errInflated", len(zeros), decompressFloor, err)
	}
}

// TestLZ4AllocatesItsContent: decoding a batch of kafka-go's codec (which
// declares 4 MiB blocks) allocates about its content, not a 4 MiB block
// per frame: nothing while the pool holds a buffer, and under 1 MiB when
// collections have emptied the pools in between (as they do in a worker,
// every few MiB allocated). pierrec's Reader took 8.9 MB per batch then.
func TestLZ4AllocatesItsContent(t *testing.T) {
	if raceOn {
		t.Skip("under the race detector sync.Pool drops a share of what is put back at random: allocations are not the decoder's")
	}
	plain := lz4Plain()[:280<<10]
	var buf bytes.Buffer
	w := (&klz4.Codec{}).NewWriter(&buf)
	w.Write(plain)
	w.Close()
	allocsPerBatch(t, compress.Lz4, buf.Bytes(), plain, 64<<10, 1<<20)
}

// allocsPerBatch decodes frame (of plain) 50 times and checks the bytes
// allocated per batch: at most steady with the pools warm (the output
// handed back), at most afterGC when two collections emptied the pools
// before each batch.
func allocsPerBatch(t *testing.T, codec compress.Compression, frame, plain []byte, steady, afterGC uint64) {
	t.Helper()
	const n = 50
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range n {
		out, err := decompress(codec, frame)
		if err != nil || !bytes.Equal(out, plain) {
			t.Fatalf("%d bytes, err %v", len(out), err)
		}
		setPool.put(out)
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / n; per > steady {
		t.Errorf("%d bytes allocated per decoded batch of %d bytes (pooled output); want at most %d", per, len(plain), steady)
	}
	runtime.ReadMemStats(&before)
	for range 10 {
		runtime.GC() // twice: a sync.Pool keeps its contents through one
		runtime.GC()
		out, err := decompress(codec, frame)
		if err != nil || !bytes.Equal(out, plain) {
			t.Fatalf("%d bytes, err %v", len(out), err)
		}
		setPool.put(out)
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / 10; per > afterGC {
		t.Errorf("%d bytes allocated per decoded batch of %d bytes after collections; want at most %d", per, len(plain), afterGC)
	}
}

// TestPartitionBytesScaledByCompression: the partition limit a fetch sends
// is MaxBytes for uncompressed input, a quarter of it before the first
// records, MaxBytes times the wire bytes' share of the memory for
// compressed input (averaged with the fetch before), and never below
// minPartitionBytes.
func TestPartitionBytesScaledByCompression(t *testing.T) {
	p := &Partition{cfg: Config{MaxBytes: 512 << 10}}
	if got := p.partitionBytes(); got != 128<<10 {
		t.Errorf("before any records: %d, want a quarter of 512 KiB", got)
	}
	p.observeWire(300<<10, 0)
	if got := p.partitionBytes(); got != 512<<10 {
		t.Errorf("uncompressed: %d, want 512 KiB", got)
	}
	p = &Partition{cfg: Config{MaxBytes: 512 << 10}}
	p.observeWire(100<<10, 400<<10) // 5:1 in memory
	if got := p.partitionBytes(); got != 512<<10/5 {
		t.Errorf("compressed 4:1: %d, want %d", got, 512<<10/5)
	}
	p.observeWire(100<<10, 0) // then an uncompressed fetch: the mean, 0.6
	maxBytes, share := 512<<10, (100.0/500.0+1)/2
	if got, want := p.partitionBytes(), int(float64(maxBytes)*share); got != want {
		t.Errorf("after a compressed and an uncompressed fetch: %d, want %d", got, want)
	}
	p = &Partition{cfg: Config{MaxBytes: 512 << 10}}
	p.observeWire(1<<10, 255<<10)
	if got := p.partitionBytes(); got != minPartitionBytes {
		t.Errorf("compressed 255:1: %d, want the floor %d", got, minPartitionBytes)
	}
}
