package loadgen

import "testing"

func BenchmarkGenerator(b *testing.B) {
	for _, kind := range []string{KindOrder, KindURL} {
		b.Run(kind, func(b *testing.B) {
			g, err := NewGenerator(GenConfig{Kind: kind, Count: b.N + 1, Duplicates: 0.2, Seed: 1})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, ok := g.Next(); !ok {
					b.Fatal("exhausted")
				}
			}
		})
	}
}
