package checkpoint

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestAcceptance runs the same behaviour checks against every backend.
func TestAcceptance(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			url := b.url(t)
			t.Run("lifecycle", func(t *testing.T) { testLifecycle(t, url+"-life") })
			t.Run("corruption", func(t *testing.T) { testCorruption(t, url+"-corrupt") })
			t.Run("crash-before-manifest", func(t *testing.T) { testCrashBeforeManifest(t, url+"-crash") })
			t.Run("fencing", func(t *testing.T) { testFencing(t, url+"-fence") })
			t.Run("race", func(t *testing.T) { testRace(t, url+"-race", 200) })
			t.Run("inspect", func(t *testing.T) { testInspect(t, url+"-inspect") })
			t.Run("create-only-check", func(t *testing.T) { testProbe(t, url+"-probe") })
			t.Run("probe-leftover", func(t *testing.T) { testProbeLeftover(t, url+"-leftover") })
		})
	}
}

func withSuffix(url, suffix string) string {
	if i := strings.Index(url, "?"); i >= 0 {
		return url[:i] + suffix + url[i:]
	}
	return url + suffix
}

func testLifecycle(t *testing.T, url string) {
	url = fixURL(url)
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	o := testOptions(reg)
	o.OrphanGrace = time.Nanosecond // collect unreferenced objects at once
	s := openT(t, url, o)
	p := s.Partition("g", "t", 0)
	if _, err := p.Restore(ctx, loadAll(new([][32]byte))); !errors.Is(err, ErrNoCheckpoint) {
		t.Fatalf("restore of nothing: %v, want ErrNoCheckpoint", err)
	}
	if err := p.Claim(ctx, "w1"); err != nil {
		t.Fatalf("claim: %v", err)
	}
	// A fresh handle still sees no checkpoint: an empty claim has no state.
	if _, err := s.Partition("g", "t", 0).Restore(ctx, loadAll(new([][32]byte))); !errors.Is(err, ErrNoCheckpoint) {
		t.Fatalf("restore of an empty claim: %v, want ErrNoCheckpoint", err)
	}

	st := state{offset: 100, gens: []Generation{gen(1, true, 1, 300_000), gen(2, true, 2, 200_000), gen(3, false, 3, 100_000)}}
	m1, err := p.Commit(ctx, st.checkpoint())
	if err != nil {
		t.Fatalf("commit: %v", err)
	}
	if m1.Seq != 2 {
		t.Fatalf("first commit seq %d, want 2 (after the claim)", m1.Seq)
	}
	restoreT(t, s, st)

	// Periodic checkpoint: sealed generations are not uploaded again.
	st.offset = 150
	st.gens[2] = gen(3, false, 33, 100_000)
	m2, err := p.Commit(ctx, st.checkpoint())
	if err != nil {
		t.Fatalf("commit 2: %v", err)
	}
	for i := 0; i < 2; i++ {
		if c := st.gens[i].Source.(*randSource).calls.Load(); c != 1 {
			t.Fatalf("sealed generation %d written %d times, want once", i+1, c)
		}
		if m2.Generations[i].Key != m1.Generations[i].Key {
			t.Fatalf("sealed generation %d re-stored: %s vs %s", i+1, m2.Generations[i].Key, m1.Generations[i].Key)
		}
	}
	if m2.Generations[2].Key == m1.Generations[2].Key {
		t.Fatal("live generation not uploaded again")
	}
	restoreT(t, s, st)

	// Rotation: 3 is sealed now (uploaded once more, as sealed), 4 is live.
	st.offset = 200
	st.gens = []Generation{st.gens[1], gen(3, true, 34, 100_000), gen(4, false, 4, 50_000)}
	if _, err := p.Commit(ctx, st.checkpoint()); err != nil {
		t.Fatalf("commit 3: %v", err)
	}
	st.offset = 250
	st.gens[2] = gen(4, false, 44, 60_000)
	m4, err := p.Commit(ctx, st.checkpoint())
	if err != nil {
		t.Fatalf("commit 4: %v", err)
	}
	if c := st.gens[1].Source.(*randSource).calls.Load(); c != 1 {
		t.Fatalf("sealed generation 3 written %d times after rotation, want once", c)
	}
	if m4.Generations[1].Seq != 4 || m4.Generations[2].Seq != 5 {
		t.Fatalf("upload seqs %d,%d, want 4,5", m4.Generations[1].Seq, m4.Generations[2].Seq)
	}
	_, rm := restoreT(t, s, st)
	if rm.Seq != m4.Seq {
		t.Fatalf("restored seq %d, want %d", rm.Seq, m4.Seq)
	}

	// Retention: the newest 3 manifests, and only objects they name.
	for i := 0; i < 3; i++ {
		st.offset += 10
		if _, err := p.Commit(ctx, st.checkpoint()); err != nil {
			t.Fatalf("commit: %v", err)
		}
	}
	manifests := listKeys(t, s, p.dir+"/manifests/")
	if len(manifests) != 3 {
		t.Fatalf("manifests after retention: %v", manifests)
	}
	named := map[string]bool{}
	for _, k := range manifests {
		seq, _ := parseManifestKey(p.dir, k)
		m, err := p.readManifest(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range m.Generations {
			named[p.dir+"/"+g.Key] = true
		}
	}
	gens := listKeys(t, s, p.dir+"/gens/")
	for _, k := range gens {
		if !named[k] {
			t.Errorf("unreferenced object kept: %s", k)
		}
	}
	if len(gens) != len(named) {
		t.Errorf("%d objects stored, %d named", len(gens), len(named))
	}
	if d := counter(t, p.m.deleted); d == 0 {
		t.Error("objects_deleted_total stayed 0")
	}
	if f := counter(t, p.m.failures); f != 0 {
		t.Errorf("failures_total = %v", f)
	}
	restoreT(t, s, st)

	// A loader may open and read generations in parallel.
	var mu sync.Mutex
	read := 0
	_, err = s.Partition("g", "t", 0).Restore(ctx, func(m *Manifest, open func(context.Context, GenerationRef) (io.ReadCloser, error)) error {
		var wg sync.WaitGroup
		errs := make([]error, len(m.Generations))
		for i, g := range m.Generations {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := open(ctx, g)
				if err != nil {
					errs[i] = err
					return
				}
				n, err := io.Copy(io.Discard, r)
				if err == nil {
					err = r.Close()
				}
				errs[i] = err
				mu.Lock()
				read += int(n)
				mu.Unlock()
			}()
		}
		wg.Wait()
		return errors.Join(errs...)
	})
	want := 0
	for _, g := range st.gens {
		want += int(g.Source.(*randSource).size)
	}
	if err != nil || read != want {
		t.Fatalf("parallel restore: %v, %d bytes", err, read)
	}
}

// fixURL turns "base-suffix" into a valid location for each scheme: the
// suffix goes into the path, before any query.
func fixURL(u string) string {
	for _, suf := range []string{"-life", "-corrupt", "-crash", "-fence", "-race", "-inspect", "-probe", "-leftover"} {
		if strings.HasSuffix(u, suf) {
			base := strings.TrimSuffix(u, suf)
			return withSuffix(base, "/"+strings.TrimPrefix(suf, "-"))
		}
	}
	return u
}

func testCorruption(t *testing.T, url string) {
	url = fixURL(url)
	ctx := context.Background()
	o := testOptions(prometheus.NewRegistry())
	o.Retain = 10
	s := openT(t, url, o)
	p := s.Partition("g", "t", 0)
	if err := p.Claim(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	// Five checkpoints, each with its own live generation.
	var states []state
	var ms []*Manifest
	for i := 0; i < 5; i++ {
		st := state{offset: int64(10 * (i + 1)), gens: []Generation{gen(1, true, 1, 70_000), gen(2, false, uint64(100+i), 50_000)}}
		m, err := p.Commit(ctx, st.checkpoint())
		if err != nil {
			t.Fatal(err)
		}
		states, ms = append(states, st), append(ms, m)
	}
	liveKey := func(i int) string { return p.dir + "/" + ms[i].Generations[1].Key }

	cases := []struct {
		name   string
		break_ func()
		want   int // index of the state restore must return
	}{
		{"bit-flip", func() { mutateObject(t, s, liveKey(4), func(b []byte) []byte { b[len(b)/2] ^= 0x10; return b }) }, 3},
		{"truncated", func() { mutateObject(t, s, liveKey(3), func(b []byte) []byte { return b[:len(b)-100] }) }, 2},
		{"missing", func() {
			if err := s.bkt.Delete(ctx, liveKey(2)); err != nil {
				t.Fatal(err)
			}
		}, 1},
		{"manifest", func() {
			mutateObject(t, s, manifestKey(p.dir, ms[1].Seq), func(b []byte) []byte {
				return []byte(strings.Replace(string(b), `"input_offset": 20`, `"input_offset": 21`, 1))
			})
		}, 0},
	}
	for _, c := range cases {
		c.break_()
		q := s.Partition("g", "t", 0)
		before := counter(t, q.m.fallbacks)
		var got [][32]byte
		m, err := q.Restore(ctx, loadAll(&got))
		if err != nil {
			t.Fatalf("%s: restore: %v", c.name, err)
		}
		if m.Seq != ms[c.want].Seq || m.InputOffset != states[c.want].offset {
			t.Fatalf("%s: restored seq %d offset %d, want seq %d", c.name, m.Seq, m.InputOffset, ms[c.want].Seq)
		}
		if d := digest(t, states[c.want].gens[1].Source); got[1] != d {
			t.Fatalf("%s: wrong bytes restored", c.name)
		}
		if n := counter(t, q.m.fallbacks) - before; n != float64(4-c.want) {
			t.Fatalf("%s: %v fallbacks counted, want %d", c.name, n, 4-c.want)
		}
	}
	// A loader that reads nothing still gets the object verified.
	q := s.Partition("g", "t", 0)
	mutateObject(t, s, p.dir+"/"+ms[0].Generations[1].Key, func(b []byte) []byte { b[len(b)-1] ^= 1; return b })
	_, err := q.Restore(ctx, func(m *Manifest, open func(context.Context, GenerationRef) (io.ReadCloser, error)) error {
		for _, g := range m.Generations {
			if _, err := open(ctx, g); err != nil {
				return err
			}
		}
		return nil
	})
	if !errors.Is(err, ErrNoUsableCheckpoint) || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("all checkpoints broken: %v, want ErrNoUsableCheckpoint wrapping ErrCorrupt", err)
	}
}

func testCrashBeforeManifest(t *testing.T, url string) {
	url = fixURL(url)
	ctx := context.Background()
	o := testOptions(prometheus.NewRegistry())
	s := openT(t, url, o)
	p := s.Partition("g", "t", 0)
	if err := p.Claim(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	st := state{offset: 5, gens: []Generation{gen(1, false, 1, 40_000)}}
	if _, err := p.Commit(ctx, st.checkpoint()); err != nil {
		t.Fatal(err)
	}
	// The crash: data of the next checkpoint uploaded, manifest never written.
	orphan, err := p.upload(ctx, gen(1, false, 2, 40_000), p.objectKey(1, p.seq+1, ""), p.seq+1, p.s.opts.Compression)
	if err != nil {
		t.Fatal(err)
	}
	restoreT(t, s, st) // nothing partial visible

	// The new owner commits; the orphan is young, so it stays (it could be a
	// concurrent writer's upload in flight).
	q, _ := restoreT(t, s, st)
	if err := q.Claim(ctx, "w2"); err != nil {
		t.Fatal(err)
	}
	st.offset = 6
	if _, err := q.Commit(ctx, st.checkpoint()); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(listKeys(t, s, p.dir+"/gens/"), p.dir+"/"+orphan.Key) {
		t.Fatal("young orphan deleted")
	}
	// Later, past the grace period, retention removes it.
	s.opts.now = func() time.Time { return time.Now().Add(2 * time.Hour) }
	defer func() { s.opts.now = time.Now }()
	st.offset = 7
	if _, err := q.Commit(ctx, st.checkpoint()); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(listKeys(t, s, p.dir+"/gens/"), p.dir+"/"+orphan.Key) {
		t.Fatal("old orphan not collected")
	}
	restoreT(t, s, st)
}

func testFencing(t *testing.T, url string) {
	url = fixURL(url)
	ctx := context.Background()
	s := openT(t, url, testOptions(prometheus.NewRegistry()))
	a := s.Partition("g", "t", 0)
	if _, err := a.Restore(ctx, loadAll(new([][32]byte))); !errors.Is(err, ErrNoCheckpoint) {
		t.Fatal(err)
	}
	if err := a.Claim(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	st := state{offset: 1, gens: []Generation{gen(1, false, 1, 1000)}}
	if _, err := a.Commit(ctx, st.checkpoint()); err != nil {
		t.Fatal(err)
	}
	// b takes over; a keeps running (a zombie) and is fenced.
	b, _ := restoreT(t, s, st)
	if err := b.Claim(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	_, err := a.Commit(ctx, state{offset: 99, gens: []Generation{gen(1, false, 9, 1000)}}.checkpoint())
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("zombie commit: %v, want ErrFenced", err)
	}
	if !a.Fenced() || b.Fenced() || b.Last().Seq != 3 {
		t.Fatalf("fenced a=%v b=%v, b last seq %d", a.Fenced(), b.Fenced(), b.Last().Seq)
	}
	if got := counter(t, a.m.fenced); got != 1 {
		t.Fatalf("fenced_total = %v", got)
	}
	if _, err := a.Commit(ctx, st.checkpoint()); !errors.Is(err, ErrFenced) {
		t.Fatalf("fenced handle committed again: %v", err)
	}
	st.offset = 2
	if _, err := b.Commit(ctx, st.checkpoint()); err != nil {
		t.Fatalf("new owner commit: %v", err)
	}
	// A writer far behind (its sequences deleted by retention) is fenced too.
	for i := 0; i < 5; i++ {
		st.offset++
		if _, err := b.Commit(ctx, st.checkpoint()); err != nil {
			t.Fatal(err)
		}
	}
	a.fenced = false // pretend a never saw the conflict
	a.seq = 0
	if _, err := a.Commit(ctx, st.checkpoint()); !errors.Is(err, ErrFenced) {
		t.Fatalf("writer far behind: %v, want ErrFenced", err)
	}
	restoreT(t, s, st)
}

// testRace: two writers want the same sequence at the same moment; exactly
// one must win, every time. Even trials race two new owners' Claims; odd
// trials race the current owner's Commit (uploads, then the manifest) against
// a new owner's Claim.
func testRace(t *testing.T, url string, trials int) {
	url = fixURL(url)
	ctx := context.Background()
	s := openT(t, url, testOptions(prometheus.NewRegistry()))
	deadline := time.Now().Add(30 * time.Second)
	var owner *Partition
	for i := 0; i < trials && time.Now().Before(deadline); i++ {
		hs := [2]*Partition{owner, s.Partition("g", "t", 0)}
		if i%2 == 0 || owner == nil {
			hs[0] = s.Partition("g", "t", 0)
		}
		for _, h := range hs {
			if h.claimed {
				continue
			}
			if _, err := h.Restore(ctx, loadAll(new([][32]byte))); err != nil && !errors.Is(err, ErrNoCheckpoint) {
				t.Fatal(err)
			}
		}
		var errs [2]error
		var wg sync.WaitGroup
		startCh := make(chan struct{})
		for j, h := range hs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-startCh
				if h.claimed {
					_, errs[j] = h.Commit(ctx, state{offset: int64(i), gens: []Generation{gen(1, false, uint64(i), 2000)}}.checkpoint())
				} else {
					errs[j] = h.Claim(ctx, "racer")
				}
			}()
		}
		close(startCh)
		wg.Wait()
		wins := 0
		for j, err := range errs {
			switch {
			case err == nil:
				wins++
				owner = hs[j]
			case errors.Is(err, ErrFenced):
			default:
				t.Fatalf("trial %d: %v", i, err)
			}
		}
		if wins != 1 {
			t.Fatalf("trial %d: %d writers won (%v)", i, wins, errs)
		}
		if i == trials-1 || i%50 == 0 {
			t.Logf("trial %d: exactly one winner", i)
		}
	}
}

func testInspect(t *testing.T, url string) {
	url = fixURL(url)
	ctx := context.Background()
	s := openT(t, url, testOptions(nil))
	if _, err := Inspect(ctx, s); !errors.Is(err, ErrEmptyLocation) {
		t.Fatalf("inspect of nothing: %v", err)
	}
	for _, part := range []int{0, 3} {
		p := s.Partition("orders-dedup", "orders", part)
		if err := p.Claim(ctx, "w"); err != nil {
			t.Fatal(err)
		}
		st := state{offset: 42, gens: []Generation{gen(1, true, 1, 1000), gen(2, false, 2, 500)}}
		if _, err := p.Commit(ctx, st.checkpoint()); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := Inspect(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Partitions) != 2 || rep.Partitions[1].Partition != 3 || rep.Partitions[0].Group != "orders-dedup" {
		t.Fatalf("report: %+v", rep.Partitions)
	}
	p0 := rep.Partitions[0]
	if p0.Seq != 2 || p0.InputOffset != 42 || len(p0.Generations) != 2 || p0.Bytes == 0 || p0.EstKeys != 9+18 {
		t.Fatalf("partition report: %+v", p0)
	}
	if g := p0.Generations; !g[0].Sealed || g[1].Sealed || p0.Filter.Window != 24*time.Hour {
		t.Fatalf("generations %+v, filter %+v", g, p0.Filter)
	}
}
