package bloom

import (
	"fmt"
	"testing"
)

func TestSeed(t *testing.T) {
	key := []byte("https://example.com/")
	if (Seed{}).Hash(key) != HashKey(key) {
		t.Error("the zero seed differs from HashKey")
	}
	a, err := NewSeed()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewSeed()
	if a.IsZero() || a == b {
		t.Fatalf("seeds %v and %v: want two distinct non-zero seeds", a, b)
	}
	if a.Hash(key) == HashKey(key) || a.Hash(key) == b.Hash(key) {
		t.Error("a seed does not change the hash")
	}
	p, err := ParseSeed(a.String())
	if err != nil || p != a {
		t.Errorf("ParseSeed(String()) = %v, %v; want %v", p, err, a)
	}
	if s, err := ParseSeed(""); err != nil || !s.IsZero() {
		t.Errorf(`ParseSeed("") = %v, %v; want the zero seed`, s, err)
	}
	for _, bad := range []string{"xyz", "00", a.String() + "00"} {
		if _, err := ParseSeed(bad); err == nil {
			t.Errorf("ParseSeed(%q) accepted", bad)
		}
	}
}

// TestSeedDefeatsGrinding: with the unkeyed hash, an attacker who knows it
// finds, offline, a few hundred keys that make a chosen target key test as
// seen in a filter they have never seen (a chosen false positive). The same
// keys do nothing to a filter keyed with a secret seed.
func TestSeedDefeatsGrinding(t *testing.T) {
	const capacity = 10_000
	target := []byte("https://victim.example/important")
	// The attacker's offline search, with the public hash: keep keys that
	// land in the target's block until their bits cover the target's.
	scratch, err := NewFilter(capacity, 0.01)
	if err != nil {
		t.Fatal(err)
	}
	th := HashKey(target)
	tp, to := scratch.block(th)
	var crafted [][]byte
	for i := 0; !scratch.Test(th); i++ {
		if i > 5_000_000 {
			t.Fatalf("no collision set after %d candidates", i)
		}
		c := fmt.Appendf(nil, "https://attacker.example/%d", i)
		h := HashKey(c)
		if p, o := scratch.block(h); p == tp && o == to {
			scratch.Add(h)
			crafted = append(crafted, c)
		}
	}
	t.Logf("%d crafted keys cover the target's bits", len(crafted))

	victim := func(seed Seed) bool {
		f, err := NewFilter(capacity, 0.01)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range crafted {
			f.Add(seed.Hash(c))
		}
		return f.Test(seed.Hash(target))
	}
	if !victim(Seed{}) {
		t.Fatal("unkeyed: the crafted keys did not make the target a false positive (the attack this test guards against)")
	}
	// A fixed seed keeps the test deterministic; any secret one works alike.
	if victim(Seed{K1: 0x9e3779b97f4a7c15, K2: 0xc2b2ae3d27d4eb4f}) {
		t.Error("keyed: the crafted keys still make the target a false positive")
	}
}

func BenchmarkHash(b *testing.B) {
	key := []byte("https://www.example.com/some/path/to/a/page.html?q=1")
	seed := Seed{K1: 1, K2: 2}
	b.Run("unkeyed", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = HashKey(key)
		}
	})
	b.Run("keyed", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = seed.Hash(key)
		}
	})
}
