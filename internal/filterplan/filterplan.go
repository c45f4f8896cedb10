// Package filterplan describes the settings that plan a dedup filter —
// window, generations, capacity and false-positive rate — once: their type
// (Params), their ranges, and the words that tell a user a value lies
// outside them.
//
// Every layer that takes these settings checks them here: `bloomgate run`
// (internal/config, placing each problem at its flag, variable or line),
// the worker (worker.Config.Validate) and the filter itself
// (bloom.Config.Validate). A value one of them accepts, all accept, and a
// value they refuse is refused with the same sentence. The package sits
// below all three, so that the worker keeps the filter behind its seam.
//
// Capacity means the expected distinct keys per window of whatever the
// caller plans: the whole input topic for `bloomgate run` and the worker,
// one partition for the filter. The words therefore say neither.
package filterplan

import (
	"fmt"
	"time"

	"github.com/bloomgate/bloomgate/internal/quantity"
)

// Params are the settings that plan a filter. The same type travels from
// `bloomgate run` (the whole input topic's) through the worker (one
// partition's, Capacity its share) to the filter (bloom.Config) and into
// every checkpoint manifest (checkpoint.FilterParams records them with the
// filter's kind).
type Params struct {
	Window      time.Duration // dedup window W, > 0
	Generations int           // ring size G, MinGenerations to MaxGenerations
	Capacity    uint64        // expected distinct keys per window, > 0
	FPR         float64       // target false-positive rate, (0,1)
}

// Settings' names, as `bloomgate run` spells its flags.
const (
	Window      = "window"
	Generations = "generations"
	Capacity    = "capacity"
	FPR         = "fpr"
)

// Ranges of the settings.
const (
	// MinGenerations is the fewest generations of a ring: the window spans
	// Generations-1 of them, plus the one being filled.
	MinGenerations = 2
	// MaxGenerations is the most generations. More buy little (a
	// generation's share of the window shrinks as 1/(G-1), the memory
	// overhead G/(G-1) is already 1.6 % at 64) and cost a lookup per
	// generation in the ring; the fingerprint kind's age tags (6 bits)
	// hold no more.
	MaxGenerations = 64
	// MinGenerationSpan is the shortest span of one generation,
	// window / (generations - 1): below it generations would rotate on
	// every few records and a checkpoint would describe a moving target.
	MinGenerationSpan = time.Second
)

// RangeError is one setting outside its range.
type RangeError struct {
	Setting string // Window, Generations, Capacity or FPR
	// Problem is the value, what is accepted instead and an example, to
	// be placed after the setting's name.
	Problem string
}

func (e *RangeError) Error() string { return e.Setting + ": " + e.Problem }

// Check returns every setting of p outside its range, in the order window,
// generations, capacity, fpr; none if all lie within. The span of a
// generation is checked, as a problem of the window, only when the window
// and the generations are each within range.
func (p Params) Check() []*RangeError {
	window, generations := p.Window, p.Generations
	var errs []*RangeError
	bad := func(setting, format string, args ...any) {
		errs = append(errs, &RangeError{Setting: setting, Problem: fmt.Sprintf(format, args...)})
	}
	if window <= 0 {
		bad(Window, "%s: must be positive (e.g. 24h)", quantity.Duration(window))
	}
	if err := CheckGenerations(generations); err != nil {
		errs = append(errs, err)
	} else if window > 0 && window/time.Duration(generations-1) < MinGenerationSpan {
		bad(Window, "%s over %d generations gives generations shorter than %s: use a longer --window or fewer --generations",
			quantity.Duration(window), generations, quantity.Duration(MinGenerationSpan))
	}
	if p.Capacity == 0 {
		bad(Capacity, "0 keys: set the expected distinct keys per window (e.g. 10M)")
	}
	if err := CheckFPR(p.FPR); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// CheckGenerations returns the problem of a generation count outside
// MinGenerations to MaxGenerations, or nil.
func CheckGenerations(generations int) *RangeError {
	if generations >= MinGenerations && generations <= MaxGenerations {
		return nil
	}
	return &RangeError{Setting: Generations,
		Problem: fmt.Sprintf("%d: must be between %d and %d (e.g. 4)", generations, MinGenerations, MaxGenerations)}
}

// CheckFPR returns the problem of a false-positive rate outside (0, 1), or
// nil. How small a rate the filter reaches depends on its kind and the
// generations: bloom's sizing says.
func CheckFPR(fpr float64) *RangeError {
	if fpr > 0 && fpr < 1 {
		return nil
	}
	return &RangeError{Setting: FPR,
		Problem: fmt.Sprintf("%s: must be strictly between 0 and 1, i.e. 0%% and 100%% (e.g. 0.01 or 1%%)", quantity.Rate(fpr))}
}
