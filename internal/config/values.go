package config

import (
	"flag"
	"math"
	"strings"
	"time"

	"github.com/bloomgate/bloomgate/internal/worker"
)

// The flag.Value types of the settings. Each String is what its Set reads
// back, so --help shows defaults the way a user would type them.

// DurationVar defines a duration flag that reads ParseDuration's forms
// (7d, 1d12h, 90s) and shows its default as FormatDuration writes it.
func DurationVar(fs *flag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var(durationValue{p}, name, usage)
}

// BoundVar defines a duration flag for a bound that a user turns off by
// writing 0 (0s): that is stored as worker.NoBound, the worker's one way of
// saying "no bound", and shown as 0s again. Otherwise it is DurationVar.
func BoundVar(fs *flag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var(boundValue{durationValue{p}}, name, usage)
}

// Counter is the integer type of a count flag.
type Counter interface{ ~int | ~int64 | ~uint64 }

// CountVar defines a count flag that reads ParseCount's forms (10M, 1e7,
// 10_000_000) and shows its default as FormatCount writes it.
func CountVar[T Counter](fs *flag.FlagSet, p *T, name string, value T, usage string) {
	*p = value
	fs.Var(countValue[T]{p}, name, usage)
}

// RateVar defines a rate flag that reads a fraction (0.01) or a
// percentage (1%).
func RateVar(fs *flag.FlagSet, p *float64, name string, value float64, usage string) {
	*p = value
	fs.Var(rateValue{p}, name, usage)
}

// ByteSizeVar defines a byte size flag that reads ParseByteSize's forms
// (1048576, 1MiB, 1MB).
func ByteSizeVar[T ~int | ~int64](fs *flag.FlagSet, p *T, name string, value T, usage string) {
	*p = value
	fs.Var(byteSizeValue[T]{p}, name, usage)
}

type durationValue struct{ p *time.Duration }

func (v durationValue) String() string {
	if v.p == nil {
		return "0s" // the zero value, so that PrintDefaults omits a zero default
	}
	return FormatDuration(*v.p)
}

func (v durationValue) Set(s string) error {
	d, err := ParseDuration(s)
	if err != nil {
		return err
	}
	*v.p = d
	return nil
}

func (v durationValue) Get() any        { return *v.p }
func (v durationValue) Example() string { return "30s" }
func (v durationValue) Kind() string    { return "duration" }

type boundValue struct{ durationValue }

func (v boundValue) String() string {
	if v.p != nil && *v.p == worker.NoBound {
		return "0s"
	}
	return v.durationValue.String()
}

func (v boundValue) Set(s string) error {
	if err := v.durationValue.Set(s); err != nil {
		return err
	}
	if *v.p == 0 {
		*v.p = worker.NoBound
	}
	return nil
}

type countValue[T Counter] struct{ p *T }

func (v countValue[T]) String() string {
	if v.p == nil {
		return "0"
	}
	return FormatCount(uint64(*v.p))
}

func (v countValue[T]) Set(s string) error {
	n, err := parseCount(s, countLimit[T]())
	if err != nil {
		return err
	}
	*v.p = T(n)
	return nil
}

func (v countValue[T]) Get() any        { return *v.p }
func (v countValue[T]) Example() string { return "10M" }
func (v countValue[T]) Kind() string    { return "count" }

// countLimit is the largest count a T holds.
func countLimit[T Counter]() uint64 {
	switch any(T(0)).(type) {
	case uint64:
		return math.MaxUint64
	case int64:
		return math.MaxInt64
	}
	return math.MaxInt
}

type rateValue struct{ p *float64 }

func (v rateValue) String() string {
	if v.p == nil {
		return "0"
	}
	return FormatRate(*v.p)
}

func (v rateValue) Set(s string) error {
	f, err := ParseRate(s)
	if err != nil {
		return err
	}
	*v.p = f
	return nil
}

func (v rateValue) Get() any        { return *v.p }
func (v rateValue) Example() string { return "1%" }
func (v rateValue) Kind() string    { return "rate" }

type byteSizeValue[T ~int | ~int64] struct{ p *T }

func (v byteSizeValue[T]) String() string {
	if v.p == nil {
		return "0"
	}
	return FormatByteSize(uint64(*v.p))
}

func (v byteSizeValue[T]) Set(s string) error {
	limit := uint64(math.MaxInt64)
	if _, ok := any(T(0)).(int); ok {
		limit = math.MaxInt
	}
	n, err := parseByteSize(s, limit)
	if err != nil {
		return err
	}
	*v.p = T(n)
	return nil
}

func (v byteSizeValue[T]) Get() any        { return *v.p }
func (v byteSizeValue[T]) Example() string { return "1MiB" }
func (v byteSizeValue[T]) Kind() string    { return "size" }

// listValue is a string list flag: comma-separated and/or repeated. The
// first Set replaces the default.
type listValue struct {
	p   *[]string
	set bool
}

func (l *listValue) String() string {
	if l == nil || l.p == nil {
		return ""
	}
	return strings.Join(*l.p, ",")
}

func (l *listValue) Set(s string) error {
	if !l.set {
		*l.p = nil
		l.set = true
	}
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			*l.p = append(*l.p, v)
		}
	}
	return nil
}

func (l *listValue) isList() {}
