package exact

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Benchmarks. Sizes come from the environment so that go test -bench
// stays quick by default; docs/exact.md has the commands and figures at
// 10 M keys.
//
//	EXACT_BENCH_KEYS        keys in the window (default 200000)
//	EXACT_BENCH_GENS        generations in the window (default 4)
//	EXACT_BENCH_FLUSH_KEYS  Options.FlushKeys (default: the default)
//	EXACT_BENCH_DIR         where stores are built (default: a temp dir)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func benchOptions() Options {
	return Options{FlushKeys: envInt("EXACT_BENCH_FLUSH_KEYS", DefaultFlushKeys)}
}

// cpuTime is the process's user+system CPU time: on a shared machine it
// is steadier than wall time (background merges count too).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procStatus returns a field of /proc/self/status in MiB (VmRSS, VmHWM,
// RssAnon, RssFile: mapped run files count as RssFile).
func procStatus(field string) float64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

const benchGen0 = 1_000_000 // realistic-looking generation IDs (span indices)

// window feeds a store like the worker would: keys of generation gi are
// hashN(gi, i); every perGen keys a new generation opens and the one
// that leaves the window of G is dropped.
type window struct {
	s       *Store
	G       int
	perGen  int
	gi      int // current generation index
	n       int // keys added to it
	batch   []Hash
	batchSz int
}

func newWindow(s *Store, keys, G int) *window {
	return &window{s: s, G: G, perGen: max(keys/G, 1), batchSz: 500}
}

func (w *window) gen() uint64 { return benchGen0 + uint64(w.gi) }

// add adds n keys in batches of batchSz (a Kafka fetch's worth).
func (w *window) add(tb testing.TB, n int) {
	for n > 0 {
		if w.n == w.perGen {
			w.gi++
			w.n = 0
			if w.gi >= w.G {
				if err := w.s.DropBefore(benchGen0 + uint64(w.gi-w.G+1)); err != nil {
					tb.Fatal(err)
				}
			}
		}
		k := min(n, w.batchSz, w.perGen-w.n)
		w.batch = w.batch[:0]
		for i := range k {
			w.batch = append(w.batch, hashN(uint64(w.gi), uint64(w.n+i)))
		}
		if err := w.s.AddBatch(w.gen(), w.batch); err != nil {
			tb.Fatal(err)
		}
		w.n += k
		n -= k
	}
}

// fixture is one store holding a full window, built once per process.
type fixture struct {
	dir, bucketDir string
	s              *Store
	keys, G        int
	perGen         int
	files          []File
	buildWall      time.Duration
	buildCPU       time.Duration
	rssBefore      float64
}

var fx struct {
	once sync.Once
	f    *fixture
	err  error
	root string
}

func benchRoot() (string, error) {
	fx.root = os.Getenv("EXACT_BENCH_DIR")
	if fx.root == "" {
		return os.MkdirTemp("", "exact-bench-")
	}
	return os.MkdirTemp(fx.root, "exact-bench-")
}

func getFixture(b *testing.B) *fixture {
	b.Helper()
	fx.once.Do(func() { fx.f, fx.err = buildFixture(b) })
	if fx.err != nil {
		b.Fatal(fx.err)
	}
	return fx.f
}

func buildFixture(b *testing.B) (*fixture, error) {
	root, err := benchRoot()
	if err != nil {
		return nil, err
	}
	fx.root = root
	f := &fixture{
		dir: filepath.Join(root, "store"), bucketDir: filepath.Join(root, "bucket"),
		keys: envInt("EXACT_BENCH_KEYS", 200_000), G: envInt("EXACT_BENCH_GENS", 4),
		rssBefore: procStatus("VmRSS"),
	}
	f.perGen = f.keys / f.G
	s, err := Open(f.dir, benchOptions())
	if err != nil {
		return nil, err
	}
	f.s = s
	start, cpu0 := time.Now(), cpuTime()
	w := newWindow(s, f.keys, f.G)
	w.add(b, f.perGen*f.G)
	sn, err := s.Checkpoint(context.Background())
	if err != nil {
		return nil, err
	}
	f.buildWall, f.buildCPU = time.Since(start), cpuTime()-cpu0
	defer sn.Release()
	// Let background merges finish, so that lookups are measured alone
	// (their CPU time would count otherwise).
	if err := s.mergeAll(context.Background()); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(f.bucketDir, 0o755); err != nil {
		return nil, err
	}
	for _, file := range sn.Files {
		if err := copyOut(sn, file, filepath.Join(f.bucketDir, file.Name)); err != nil {
			return nil, err
		}
	}
	f.files = sn.Files
	fmt.Fprintf(os.Stderr, "fixture: %d keys in %d generations, built in %v (%.0f ns/key wall, %.0f ns/key CPU), checkpoint %d files %.1f MB\n",
		f.perGen*f.G, f.G, f.buildWall.Round(time.Millisecond), float64(f.buildWall)/float64(f.keys), float64(f.buildCPU)/float64(f.keys),
		len(sn.Files), float64(sn.Bytes())/1e6)
	return f, nil
}

func copyOut(sn *Snapshot, f File, path string) error {
	r, err := sn.Open(f.Name)
	if err != nil {
		return err
	}
	defer r.Close()
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, r); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func (f *fixture) open(_ context.Context, file File) (io.ReadCloser, error) {
	return os.Open(filepath.Join(f.bucketDir, file.Name))
}

func TestMain(m *testing.M) {
	code := m.Run()
	if fx.f != nil {
		_ = fx.f.s.Close()
	}
	if fx.root != "" && fx.root != os.Getenv("EXACT_BENCH_DIR") {
		_ = os.RemoveAll(fx.root)
	}
	os.Exit(code)
}

// BenchmarkInsert adds b.N keys to a fresh store through a rotating
// window (batches of 500, a new generation every EXACT_BENCH_KEYS/GENS
// keys, the oldest dropped), then checkpoints: the cost per key includes
// flushes and merges.
func BenchmarkInsert(b *testing.B) {
	keys, G := envInt("EXACT_BENCH_KEYS", 200_000), envInt("EXACT_BENCH_GENS", 4)
	dir := b.TempDir()
	s, err := Open(dir, benchOptions())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	w := newWindow(s, keys, G)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	w.add(b, b.N)
	sn, err := s.Checkpoint(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
	sn.Release()
}

// BenchmarkLookup measures Has and Contains on the fixture: keys present
// (anywhere in the window) and never added.
func BenchmarkLookup(b *testing.B) {
	f := getFixture(b)
	cases := []struct {
		name string
		fn   func(i int) (bool, error)
		want bool
	}{
		{"Has/present", func(i int) (bool, error) {
			gi := uint64(i % f.G)
			return f.s.Has(benchGen0+gi, hashN(gi, uint64(i*7919%f.perGen)))
		}, true},
		{"Has/absent", func(i int) (bool, error) {
			gi := uint64(i % f.G)
			return f.s.Has(benchGen0+gi, hashN(gi, uint64(f.perGen+i)))
		}, false},
		{"Contains/present-recent", func(i int) (bool, error) {
			// The newest 1 % of the window: retries and replays repeat
			// recent events.
			recent := max(f.keys/100, 1)
			return f.s.Contains(hashN(uint64(f.G-1), uint64(f.perGen-1-i*7919%recent)))
		}, true},
		{"Contains/present", func(i int) (bool, error) {
			gi := uint64(i % f.G)
			return f.s.Contains(hashN(gi, uint64(i*7919%f.perGen)))
		}, true},
		{"Contains/absent", func(i int) (bool, error) {
			return f.s.Contains(hashN(uint64(f.G+1), uint64(i)))
		}, false},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu0 := cpuTime()
			for i := 0; b.Loop(); i++ {
				got, err := c.fn(i)
				if err != nil {
					b.Fatal(err)
				}
				if got != c.want {
					b.Fatalf("lookup %d = %v, want %v", i, got, c.want)
				}
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
			b.ReportMetric(procStatus("RssAnon"), "rss-anon-MiB")
			b.ReportMetric(procStatus("RssFile"), "rss-file-MiB")
		})
	}
}

// BenchmarkDisk reports the fixture's bytes per key, its runs and the
// process's memory after the fixture was built and looked up in.
func BenchmarkDisk(b *testing.B) {
	f := getFixture(b)
	for b.Loop() {
	}
	st := f.s.Stats()
	b.ReportMetric(float64(st.DiskBytes)/float64(f.keys), "disk-B/key")
	var total int64
	for _, file := range f.files {
		total += file.Size
	}
	b.ReportMetric(float64(total)/float64(f.keys), "checkpoint-B/key")
	b.ReportMetric(float64(st.Runs), "runs")
	runtime.GC()
	b.ReportMetric(procStatus("VmHWM"), "peak-rss-MiB")
	b.ReportMetric(procStatus("RssAnon"), "rss-anon-MiB")
	b.ReportMetric(procStatus("RssFile"), "rss-file-MiB")
	b.ReportMetric(f.rssBefore, "rss-before-MiB")
	b.ReportMetric(float64(f.buildCPU)/float64(f.keys), "build-cpu-ns/key")
}

// BenchmarkRestore restores the fixture's checkpoint from a directory
// standing in for the bucket (page cache: the download itself is not
// measured) into an empty directory and opens it.
func BenchmarkRestore(b *testing.B) {
	f := getFixture(b)
	root := b.TempDir()
	var bytes int64
	for _, file := range f.files {
		bytes += file.Size
	}
	b.SetBytes(bytes)
	i := 0
	for b.Loop() {
		dir := filepath.Join(root, strconv.Itoa(i))
		i++
		s, err := Restore(context.Background(), dir, f.files, f.open, benchOptions())
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if ok, err := s.Has(benchGen0, hashN(0, 1)); err != nil || !ok {
			b.Fatalf("restored store: Has = %v, %v", ok, err)
		}
		s.Close()
		os.RemoveAll(dir)
		b.StartTimer()
	}
	b.ReportMetric(float64(len(f.files)), "files")
}

// BenchmarkRotation runs a store through two full windows with a
// checkpoint every 1/8 of a generation, uploading each checkpoint's new
// files to a bucket the way the worker would, and reports what that costs:
// bytes uploaded per key added, and bytes of runs of sealed generations
// uploaded after their first checkpoint as sealed (want 0). Merges, which
// the store runs in the background, are finished before each checkpoint
// here, so that "sealed" is the same in every run.
func BenchmarkRotation(b *testing.B) {
	keys, G := envInt("EXACT_BENCH_KEYS", 200_000), envInt("EXACT_BENCH_GENS", 4)
	for b.Loop() {
		s, err := Open(b.TempDir(), benchOptions())
		if err != nil {
			b.Fatal(err)
		}
		w := newWindow(s, keys, G)
		every := max(w.perGen/8, 1)
		bucket := map[File]bool{}
		var uploaded, resealed, added, checkpoints, cut int64
		var cutMax time.Duration
		sealed := map[uint64]bool{} // generations uploaded once as sealed
		for added < int64(2*keys) {
			w.add(b, every)
			added += int64(every)
			if err := s.mergeAll(context.Background()); err != nil {
				b.Fatal(err)
			}
			t0 := time.Now()
			sn, err := s.Checkpoint(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			d := time.Since(t0)
			cut += int64(d)
			cutMax = max(cutMax, d)
			checkpoints++
			genOf := runGens(s)
			for _, f := range sn.Files {
				if bucket[f] {
					continue
				}
				if g, ok := genOf[f.Name]; ok && sealed[g] {
					resealed += f.Size
				}
				bucket[f] = true
				uploaded += f.Size
			}
			for _, g := range sn.Generations {
				if g < w.gen() {
					sealed[g] = true
				}
			}
			sn.Release()
		}
		b.ReportMetric(float64(uploaded)/float64(added), "upload-B/key")
		b.ReportMetric(float64(resealed), "sealed-reupload-B")
		b.ReportMetric(float64(cut)/float64(checkpoints)/1e6, "checkpoint-ms")
		b.ReportMetric(float64(cutMax)/1e6, "checkpoint-max-ms")
		b.ReportMetric(float64(checkpoints), "checkpoints")
		s.Close()
	}
}

// runGens maps each live run's file name to its generation.
func runGens(s *Store) map[string]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]uint64)
	for g, rs := range s.runs {
		for _, r := range rs {
			out[r.name] = g
		}
	}
	return out
}
