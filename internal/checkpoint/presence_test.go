package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// carryOver is a partition with one of everything a commit names again:
// a sealed generation, a live generation as a base and one log segment,
// and two exact store files.
type carryOver struct {
	p      *Partition
	sealed Generation
	live   Generation
	files  *exactFiles
	segs   []*GenerationLog
	m2     *Manifest // the second commit's manifest: base + segment
	offset int64
}

func newCarryOver(t *testing.T, s *Store) *carryOver {
	t.Helper()
	c := &carryOver{p: s.Partition("g", "t", 0), sealed: gen(1, true, 1, 10_000), live: gen(2, false, 2, 40_000),
		files: newExactFiles("MANIFEST", "m1", "a.run", "aaaa")}
	if err := c.p.Claim(context.Background(), "w"); err != nil {
		t.Fatal(err)
	}
	m1 := c.commit(t, nil, true)
	s1 := segment(1, 4000)
	s1.After = m1.Generations[1].Key
	c.m2 = c.commit(t, s1, true)
	if len(c.m2.Generations[1].Log) != 1 || c.m2.Generations[0].Key != m1.Generations[0].Key ||
		c.m2.Exact.Files[1].Key != m1.Exact.Files[1].Key {
		t.Fatalf("setup: the second manifest does not name the first one's objects: %+v", c.m2)
	}
	return c
}

// commit commits the sealed generation (if withSealed) and the live one
// with log (nil: whole), and the exact files.
func (c *carryOver) commit(t *testing.T, log *GenerationLog, withSealed bool) *Manifest {
	t.Helper()
	m, err := c.try(log, withSealed)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func (c *carryOver) try(log *GenerationLog, withSealed bool) (*Manifest, error) {
	if log != nil {
		c.segs = append(c.segs, log)
	}
	c.offset += 10
	live := c.live
	live.Log = log
	gens := []Generation{live}
	if withSealed {
		gens = []Generation{c.sealed, live}
	}
	cp := state{offset: c.offset, gens: gens}.checkpoint()
	cp.Exact = c.files.checkpoint(3)
	return c.p.Commit(context.Background(), cp)
}

// TestMissingObjectUploadedAgain: an object that the last manifest names
// and the next one would name again is deleted behind the store's back
// (or truncated). The next commit finds it missing, uploads it again from what it was
// handed (a sealed generation whole, a live generation whole instead of
// continuing its broken chain, an exact store file under its digest),
// logs an error naming the object and the partition and counts it once;
// a fresh store restores that manifest whole. An object the next manifest
// no longer names is not looked for.
func TestMissingObjectUploadedAgain(t *testing.T) {
	cases := []struct {
		name   string
		object func(m *Manifest) string // the key to delete
		sealed bool                     // the next commit still names the sealed generation
		action string                   // in the error line; "": nothing reported
		check  func(t *testing.T, before, after *Manifest)
		// truncate, when set, cuts the object to 10 bytes instead of
		// deleting it.
		truncate bool
	}{
		{"sealed-generation", func(m *Manifest) string { return m.Generations[0].Key }, true,
			"sealed generation 1 is uploaded whole again from memory",
			func(t *testing.T, before, after *Manifest) {
				if g := after.Generations[0]; g.Key == before.Generations[0].Key || g.Seq != after.Seq {
					t.Errorf("sealed generation %+v, want a new object uploaded for %d", g, after.Seq)
				}
				if g := after.Generations[1]; g.Key != before.Generations[1].Key || len(g.Log) != 2 {
					t.Errorf("live generation %+v, want its chain continued", g)
				}
			}, false},
		{"live-base", func(m *Manifest) string { return m.Generations[1].Key }, true,
			"live generation 2 is uploaded whole again from memory (a new log chain starts)",
			func(t *testing.T, before, after *Manifest) {
				if g := after.Generations[1]; g.Key == before.Generations[1].Key || len(g.Log) != 0 || g.Seq != after.Seq {
					t.Errorf("live generation %+v, want it whole, uploaded for %d", g, after.Seq)
				}
				if after.Generations[0].Key != before.Generations[0].Key {
					t.Error("the sealed generation was uploaded again")
				}
			}, false},
		{"log-segment", func(m *Manifest) string { return m.Generations[1].Log[0].Key }, true,
			"live generation 2 is uploaded whole again from memory (a new log chain starts)",
			func(t *testing.T, before, after *Manifest) {
				if g := after.Generations[1]; len(g.Log) != 0 || g.Seq != after.Seq {
					t.Errorf("live generation %+v, want it whole, uploaded for %d", g, after.Seq)
				}
			}, false},
		{"exact-file", func(m *Manifest) string { return m.Exact.Files[1].Key }, true,
			"exact store file a.run is uploaded again from the local exact store",
			func(t *testing.T, before, after *Manifest) {
				if f := after.Exact.Files[1]; f.Key != before.Exact.Files[1].Key || f.Seq != after.Seq {
					t.Errorf("exact file %+v, want it under its digest, uploaded for %d", f, after.Seq)
				}
			}, false},
		{"no-longer-named", func(m *Manifest) string { return m.Generations[0].Key }, false, "",
			func(t *testing.T, before, after *Manifest) {
				if len(after.Generations) != 1 || len(after.Generations[0].Log) != 2 {
					t.Errorf("generations %+v, want the live chain continued alone", after.Generations)
				}
			}, false},
		{"truncated-sealed-generation", func(m *Manifest) string { return m.Generations[0].Key }, true,
			"sealed generation 1 is uploaded whole again from memory",
			func(t *testing.T, before, after *Manifest) {
				if g := after.Generations[0]; g.Key == before.Generations[0].Key || g.Seq != after.Seq {
					t.Errorf("sealed generation %+v, want a new object uploaded for %d", g, after.Seq)
				}
			}, true},
	}
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			url := b.url(t)
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					url := withSuffix(url, "/"+tc.name)
					var logs syncBuffer
					s := openT(t, url, loggedOptions(&logs))
					c := newCarryOver(t, s)
					key := tc.object(c.m2)
					behind := openT(t, url, testOptions(nil)) // another client of the bucket
					why := "is missing from the store"
					if tc.truncate {
						mutateObject(t, behind, c.p.dir+"/"+key, func(b []byte) []byte { return b[:10] })
						why = fmt.Sprintf("holds 10 bytes in the store, not %d", c.m2.Generations[0].Bytes)
					} else if err := behind.bkt.Delete(context.Background(), c.p.dir+"/"+key); err != nil {
						t.Fatal(err)
					}
					reads := c.files.reads["a.run"].Load()

					s2 := segment(2, 4000)
					s2.After = c.m2.Generations[1].Tail()
					m3 := c.commit(t, s2, tc.sealed)
					tc.check(t, c.m2, m3)

					full := c.p.dir + "/" + key
					errLines := 0
					for _, l := range strings.Split(logs.String(), "\n") {
						if strings.Contains(l, "level=ERROR") {
							errLines++
						}
					}
					missing := counter(t, c.p.m.missing)
					if tc.action == "" {
						if missing != 0 || errLines != 0 {
							t.Errorf("an object no manifest names any more was reported: %v counted, log:\n%s", missing, logs.String())
						}
						return
					}
					if missing != 1 {
						t.Errorf("bloomgate_checkpoint_objects_missing_total = %v, want 1", missing)
					}
					if out := logs.String(); errLines != 1 || !strings.Contains(out, "checkpoint object "+full+" of partition t/0, named by manifest 3, "+why) ||
						!strings.Contains(out, tc.action+", so that checkpoint 4 is complete") {
						t.Errorf("want one error line naming %s, the partition and %q:\n%s", full, tc.action, out)
					}
					if !slices.Contains(listKeys(t, s, c.p.dir+"/"), c.p.dir+"/"+m3Key(m3, c.m2, key)) {
						t.Errorf("%s not stored again", full)
					}
					if tc.name == "exact-file" && c.files.reads["a.run"].Load() != reads+1 {
						t.Error("a.run not read again for the upload")
					}

					// A fresh store restores the new manifest whole.
					reg := prometheus.NewRegistry()
					fresh := openT(t, url, testOptions(reg))
					q := fresh.Partition("g", "t", 0)
					var got [][32]byte
					var exact map[string][]byte
					m, err := q.Restore(context.Background(), func(m *Manifest, open func(ctx context.Context, g GenerationRef) (io.ReadCloser, error)) error {
						if err := loadChains(&got)(m, open); err != nil {
							return err
						}
						var err error
						exact, err = readExact(m, open)
						return err
					})
					if err != nil {
						t.Fatalf("restore: %v", err)
					}
					if m.Seq != m3.Seq || counter(t, q.m.fallbacks) != 0 {
						t.Fatalf("restored manifest %d after %v fallbacks, want %d whole", m.Seq, counter(t, q.m.fallbacks), m3.Seq)
					}
					want := chainDigest(c.live.Source, c.segs...) // base and both segments
					if len(m3.Generations[len(m3.Generations)-1].Log) == 0 {
						want = chainDigest(c.live.Source)
					}
					if got[len(got)-1] != want {
						t.Error("restored live generation differs from the one committed")
					}
					if tc.sealed && got[0] != digest(t, c.sealed.Source) {
						t.Error("restored sealed generation differs from the one committed")
					}
					for n, data := range c.files.data {
						if !bytes.Equal(exact[n], data) {
							t.Errorf("restored exact file %s = %q, want %q", n, exact[n], data)
						}
					}
				})
			}
		})
	}
}

// m3Key is the key under which the content of the object deleted from
// m2 is stored in m3, the manifest of the commit that found it missing.
func m3Key(m3, m2 *Manifest, deleted string) string {
	for i, g := range m2.Generations {
		if slices.ContainsFunc(chainObjects(g), func(o storedObject) bool { return o.key == deleted }) {
			return m3.Generations[i].Key
		}
	}
	return deleted // an exact store file: stored under its digest again
}

// TestMissingObjectReportedOnce: a commit that finds an object missing
// and fails to upload it again reports it once; the next attempt uploads
// it without reporting it again. Deleted again after that commit, it is
// reported again.
func TestMissingObjectReportedOnce(t *testing.T) {
	var logs syncBuffer
	url := "mem://" + t.Name()
	s := openT(t, url, loggedOptions(&logs))
	c := newCarryOver(t, s)
	key := c.p.dir + "/" + c.m2.Exact.Files[1].Key
	empty := &GenerationLog{After: c.m2.Generations[1].Tail(), Source: byteSource(nil)} // nothing new: no upload
	if err := s.bkt.Delete(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	fb := &faultBucket{bucket: s.bkt, putErr: func(n int) error {
		if n == 1 {
			return errors.New("AccessDenied: injected")
		}
		return nil
	}}
	s.bkt = fb
	if _, err := c.try(empty, true); err == nil || !strings.Contains(err.Error(), "uploading exact store file a.run") {
		t.Fatalf("commit with a failing upload: %v", err)
	}
	if _, err := c.try(empty, true); err != nil {
		t.Fatal(err)
	}
	if fb.puts.Load() != 3 { // failed upload, upload, manifest
		t.Errorf("%d PUTs, want 3", fb.puts.Load())
	}
	if n := counter(t, c.p.m.missing); n != 1 {
		t.Errorf("counted %v times, want once", n)
	}
	if n := strings.Count(logs.String(), "level=ERROR"); n != 1 {
		t.Errorf("%d error lines, want 1:\n%s", n, logs.String())
	}

	if err := s.bkt.Delete(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	if _, err := c.try(empty, true); err != nil {
		t.Fatal(err)
	}
	if n := counter(t, c.p.m.missing); n != 2 {
		t.Errorf("deleted again: counted %v times, want 2", n)
	}
}

// TestPresenceCheckCost: with nothing deleted, the check costs one LIST
// per commit, whatever the number of objects named again (here 4 sealed
// generations, a chain of 20 segments and 2 exact files), and nothing is
// uploaded again: a commit uploads its segment and its manifest. A commit
// that names nothing again (the first) lists only after its manifest, as
// before.
func TestPresenceCheckCost(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			var logs syncBuffer
			s := openT(t, b.url(t), loggedOptions(&logs))
			cb := &countingBucket{bucket: s.bkt}
			s.bkt = cb
			p := s.Partition("g", "t", 0)
			if err := p.Claim(ctx, "w"); err != nil {
				t.Fatal(err)
			}
			sealed := []Generation{gen(1, true, 1, 5_000), gen(2, true, 2, 5_000), gen(3, true, 3, 5_000), gen(4, true, 4, 5_000)}
			live := gen(5, false, 5, 400_000)
			files := newExactFiles("MANIFEST", "m1", "a.run", "aaaa")
			var last *Manifest
			for i := range 22 {
				l := live
				if last != nil {
					l.Log = segment(byte(i), 1600)
					l.Log.After = last.Generations[4].Tail()
				}
				cp := state{offset: int64(i), gens: append(sealed[:4:4], l)}.checkpoint()
				cp.Exact = files.checkpoint(6)
				lists, puts, attrs, bytesBefore := cb.lists.Load(), cb.puts.Load(), cb.attrs.Load(), counter(t, p.m.bytes)
				m, err := p.Commit(ctx, cp)
				if err != nil {
					t.Fatal(err)
				}
				wantLists, wantPuts := int64(2), int64(2) // check + retention; segment + manifest
				if last == nil {
					wantLists, wantPuts = 1, 5+2+1 // nothing named again; everything uploaded
				}
				if n := cb.lists.Load() - lists; n != wantLists {
					t.Errorf("commit %d: %d LISTs, want %d", i, n, wantLists)
				}
				if n := cb.puts.Load() - puts; n != wantPuts {
					t.Errorf("commit %d: %d PUTs, want %d", i, n, wantPuts)
				}
				if n := cb.attrs.Load() - attrs; n != 0 {
					t.Errorf("commit %d: %d HEADs, want none", i, n)
				}
				if last != nil {
					up := counter(t, p.m.bytes) - bytesBefore
					seg := m.Generations[4].Log[len(m.Generations[4].Log)-1].Bytes
					if up < float64(seg) || up > float64(seg)+16<<10 {
						t.Errorf("commit %d: %v bytes uploaded, want the segment (%d) and a manifest", i, up, seg)
					}
				}
				last = m
			}
			if n := len(last.Generations[4].Log); n != 21 {
				t.Errorf("chain of %d segments, want 21", n)
			}
			if n := counter(t, p.m.missing); n != 0 || strings.Contains(logs.String(), "level=ERROR") {
				t.Errorf("nothing deleted, yet %v counted missing:\n%s", n, logs.String())
			}
		})
	}
}

// TestPresenceCheckSeesNewerOwner: when the check's LIST shows a manifest
// newer than the handle's, another writer owns the partition: the commit
// is fenced before it uploads anything, and objects that writer's
// retention deleted are not reported as missing.
func TestPresenceCheckSeesNewerOwner(t *testing.T) {
	ctx := context.Background()
	var logs syncBuffer
	url := "mem://" + t.Name()
	s := openT(t, url, loggedOptions(&logs))
	c := newCarryOver(t, s)

	// A new owner restores and claims; its retention (say) removed the
	// old owner's sealed generation.
	other := openT(t, url, testOptions(nil))
	q := other.Partition("g", "t", 0)
	if _, err := q.Restore(ctx, loadChains(new([][32]byte))); err != nil {
		t.Fatal(err)
	}
	if err := q.Claim(ctx, "new owner"); err != nil {
		t.Fatal(err)
	}
	if err := other.bkt.Delete(ctx, c.p.dir+"/"+c.m2.Generations[0].Key); err != nil {
		t.Fatal(err)
	}

	cb := &countingBucket{bucket: s.bkt}
	s.bkt = cb
	s2 := segment(2, 4000)
	s2.After = c.m2.Generations[1].Tail()
	if _, err := c.try(s2, true); !errors.Is(err, ErrFenced) {
		t.Fatalf("commit after another writer's claim: %v, want ErrFenced", err)
	}
	if n := cb.puts.Load(); n != 0 {
		t.Errorf("%d PUTs by a fenced writer, want none", n)
	}
	if !c.p.Fenced() || counter(t, c.p.m.fenced) != 1 {
		t.Errorf("handle fenced %v, fenced_total %v", c.p.Fenced(), counter(t, c.p.m.fenced))
	}
	if n := counter(t, c.p.m.missing); n != 0 || strings.Contains(logs.String(), "level=ERROR") {
		t.Errorf("a fenced writer reported %v missing objects:\n%s", n, logs.String())
	}
}
