// Package loadgen produces synthetic events with a known set of duplicates:
// the ground truth for tests, benchmarks and the demo.
//
// Two kinds of events exist. "order" events are ~200-byte JSON documents
// keyed by order_id (a payments pipeline that must never charge twice);
// "url" events carry a crawler URL in one of several spellings (case, default
// port, fragment, query order, dot segments, percent-encoding) that all
// normalize to one canonical URL (a crawler frontier that must not fetch a
// page twice).
//
// Of Count events, exactly round(Count×Duplicates) repeat a key written
// earlier in the same run and the rest introduce a new key, so the number of
// unique keys is known exactly. Duplicates are placed at random positions;
// AdjacentFraction of them repeat one of the last few keys (a producer retry),
// the rest repeat a key chosen uniformly among all earlier keys (a replay,
// possibly far back in the stream). The sequence is a pure function of the
// configuration, seed included.
package loadgen

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"
)

// Kinds of events.
const (
	KindOrder = "order"
	KindURL   = "url"
)

// DefaultKeySpace is the ID range new keys are drawn from when KeySpace is 0.
const DefaultKeySpace = 1_000_000_000_000

// adjacentWindow is how far back an adjacent duplicate may reach.
const adjacentWindow = 8

// GenConfig describes the event sequence.
type GenConfig struct {
	Kind       string  // order (default) or url
	Count      int     // events to generate, > 0
	Duplicates float64 // fraction of events that repeat an earlier key, [0,1)
	// KeySpace is the range [0, KeySpace) that key IDs are drawn from,
	// without replacement; default DefaultKeySpace. Runs with the same seed
	// and key space produce the same keys; a small key space makes runs with
	// different seeds overlap.
	KeySpace uint64
	// AdjacentFraction of the duplicates repeat one of the last 8 keys;
	// default 0.5 (negative: 0).
	AdjacentFraction float64
	Seed             uint64
	// StartTime and TimeStep set event i's timestamp to StartTime+i×TimeStep.
	// With a zero StartTime, events carry no timestamp (the writer stamps
	// them with the wall clock), and the JSON ts field is the generation time.
	StartTime time.Time
	TimeStep  time.Duration
}

func (c *GenConfig) setDefaults() {
	if c.Kind == "" {
		c.Kind = KindOrder
	}
	if c.KeySpace == 0 {
		c.KeySpace = DefaultKeySpace
	}
	if c.AdjacentFraction == 0 {
		c.AdjacentFraction = 0.5
	}
	if c.AdjacentFraction < 0 {
		c.AdjacentFraction = 0
	}
}

// Validate checks the configuration (after defaults).
func (c GenConfig) Validate() error {
	c.setDefaults()
	var errs []error
	if c.Kind != KindOrder && c.Kind != KindURL {
		errs = append(errs, fmt.Errorf("kind %q: use order or url", c.Kind))
	}
	if c.Count <= 0 {
		errs = append(errs, fmt.Errorf("count %d: must be positive", c.Count))
	}
	if !(c.Duplicates >= 0 && c.Duplicates < 1) {
		errs = append(errs, fmt.Errorf("duplicates %v: must be in [0,1), a fraction of the events", c.Duplicates))
	}
	if c.AdjacentFraction > 1 {
		errs = append(errs, fmt.Errorf("adjacent fraction %v: must be in [0,1]", c.AdjacentFraction))
	}
	if u := c.uniqueCount(); c.Count > 0 && uint64(u) > c.KeySpace {
		errs = append(errs, fmt.Errorf("key space %d is smaller than the %d unique keys needed: raise the key space or the duplicate ratio", c.KeySpace, u))
	}
	if c.TimeStep < 0 {
		errs = append(errs, errors.New("time step must not be negative"))
	}
	return errors.Join(errs...)
}

func (c GenConfig) uniqueCount() int {
	dups := int(float64(c.Count)*c.Duplicates + 0.5)
	if dups >= c.Count {
		dups = c.Count - 1
	}
	return c.Count - dups
}

// Event is one generated event.
type Event struct {
	Index     int       // position in the sequence, from 0
	Key       []byte    // the dedup key: order_id, or the canonical URL
	Value     []byte    // the JSON payload
	Time      time.Time // event time; zero when GenConfig.StartTime is zero
	KeyID     uint64    // the key's ID in the key space
	Duplicate bool      // the key occurred earlier in the sequence
	Adjacent  bool      // a duplicate of one of the last few keys
}

// Generator yields the event sequence of a GenConfig.
type Generator struct {
	cfg     GenConfig
	rng     *rand.Rand
	perm    affinePerm
	emitted []uint64 // key IDs in order of first occurrence
	recent  []uint64 // ring of the last keys written (new or repeated)
	next    int
	remNew  int
	remDup  int
	newKeys int
}

// NewGenerator validates cfg and returns its generator.
func NewGenerator(cfg GenConfig) (*Generator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	u := cfg.uniqueCount()
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6c6f616467656e)) //nolint:gosec // synthetic data
	g := &Generator{
		cfg:     cfg,
		rng:     rng,
		perm:    newAffinePerm(cfg.KeySpace, rng),
		emitted: make([]uint64, 0, u),
		remNew:  u,
		remDup:  cfg.Count - u,
	}
	return g, nil
}

// Unique is the number of distinct keys the sequence holds.
func (g *Generator) Unique() int { return g.cfg.uniqueCount() }

// Duplicates is the number of events that repeat an earlier key.
func (g *Generator) Duplicates() int { return g.cfg.Count - g.cfg.uniqueCount() }

// Next returns the next event, or false after Count events.
func (g *Generator) Next() (Event, bool) {
	if g.remNew+g.remDup == 0 {
		return Event{}, false
	}
	ev := Event{Index: g.next}
	if !g.cfg.StartTime.IsZero() {
		ev.Time = g.cfg.StartTime.Add(time.Duration(g.next) * g.cfg.TimeStep)
	}
	g.next++

	dup := len(g.emitted) > 0 && g.remDup > 0 &&
		g.rng.IntN(g.remNew+g.remDup) < g.remDup
	if dup {
		g.remDup--
		ev.Duplicate = true
		if g.rng.Float64() < g.cfg.AdjacentFraction {
			ev.Adjacent = true
			ev.KeyID = g.recent[len(g.recent)-1-g.rng.IntN(len(g.recent))]
		} else {
			ev.KeyID = g.emitted[g.rng.IntN(len(g.emitted))]
		}
	} else {
		g.remNew--
		ev.KeyID = g.perm.at(uint64(g.newKeys))
		g.newKeys++
		g.emitted = append(g.emitted, ev.KeyID)
	}
	if len(g.recent) == adjacentWindow {
		copy(g.recent, g.recent[1:])
		g.recent = g.recent[:adjacentWindow-1]
	}
	g.recent = append(g.recent, ev.KeyID)

	ts := ev.Time
	if ts.IsZero() {
		ts = time.Now()
	}
	switch g.cfg.Kind {
	case KindURL:
		canon := canonicalURL(ev.KeyID)
		ev.Key = []byte(canon)
		ev.Value = urlValue(spellURL(ev.KeyID, g.rng), ev.KeyID, ts)
	default:
		// One allocation holds key and value: the writer keeps both until
		// the batch is acknowledged.
		buf := make([]byte, 0, 256)
		buf = orderID(buf, ev.KeyID)
		n := len(buf)
		buf = appendOrderValue(buf, ev.KeyID, ts)
		ev.Key, ev.Value = buf[:n:n], buf[n:]
	}
	return ev, true
}

// affinePerm maps i in [0,n) to (a·i + b) mod n, a bijection when gcd(a,n)=1.
type affinePerm struct{ n, a, b uint64 }

func newAffinePerm(n uint64, rng *rand.Rand) affinePerm {
	if n <= 1 {
		return affinePerm{n: n, a: 1}
	}
	a := rng.Uint64N(n-1) + 1
	for gcd(a, n) != 1 {
		a++
		if a >= n {
			a = 1
		}
	}
	return affinePerm{n: n, a: a, b: rng.Uint64N(n)}
}

func (p affinePerm) at(i uint64) uint64 {
	if p.n <= 1 {
		return 0
	}
	return addMod(mulMod(p.a, i%p.n, p.n), p.b, p.n)
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func mulMod(a, b, n uint64) uint64 {
	var r uint64
	a %= n
	for b > 0 {
		if b&1 == 1 {
			r = addMod(r, a, n)
		}
		a = addMod(a, a, n)
		b >>= 1
	}
	return r
}

func addMod(a, b, n uint64) uint64 {
	if a >= n-b {
		return a - (n - b)
	}
	return a + b
}

// orderID appends the order id of key ID id: ORD- and 12 or more digits.
func orderID(dst []byte, id uint64) []byte {
	dst = append(dst, "ORD-"...)
	var tmp [20]byte
	s := strconv.AppendUint(tmp[:0], id, 10)
	for i := len(s); i < 12; i++ {
		dst = append(dst, '0')
	}
	return append(dst, s...)
}

var (
	currencies = []string{"EUR", "USD", "GBP", "CHF", "SEK"}
	countries  = []string{"DE", "FR", "US", "GB", "NL", "SE", "CH", "ES"}
	channels   = []string{"web", "app", "pos", "partner"}
)

// idRand draws the fields of an event from its key ID, so that every
// occurrence of a key carries the same fields.
type idRand struct{ pcg rand.PCG }

func newIDRand(id uint64) *idRand {
	r := &idRand{}
	r.pcg.Seed(id, 0x6f72646572)
	return r
}

func (r *idRand) IntN(n int) int { return int(r.pcg.Uint64() % uint64(n)) }

// appendOrderValue appends the ~200-byte JSON order document of key ID id.
// Everything but ts is a function of id, as in a producer retry.
func appendOrderValue(b []byte, id uint64, ts time.Time) []byte {
	r := newIDRand(id)
	b = append(b, `{"order_id":"`...)
	b = orderID(b, id)
	b = append(b, `","amount":`...)
	cents := 100 + r.IntN(99900)
	b = strconv.AppendInt(b, int64(cents/100), 10)
	b = append(b, '.', byte('0'+cents%100/10), byte('0'+cents%10))
	b = append(b, `,"currency":"`...)
	b = append(b, currencies[r.IntN(len(currencies))]...)
	b = append(b, `","customer":{"id":"C-`...)
	b = strconv.AppendInt(b, int64(100000+r.IntN(900000)), 10)
	b = append(b, `","country":"`...)
	b = append(b, countries[r.IntN(len(countries))]...)
	b = append(b, `"},"items":`...)
	b = strconv.AppendInt(b, int64(1+r.IntN(9)), 10)
	b = append(b, `,"channel":"`...)
	b = append(b, channels[r.IntN(len(channels))]...)
	b = append(b, `","ts":"`...)
	b = ts.UTC().AppendFormat(b, "2006-01-02T15:04:05.000Z")
	b = append(b, `","note":"synthetic order event for bloomgate load tests"}`...)
	return b
}
