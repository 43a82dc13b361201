package envconf

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ParseBool reads a boolean: 1, true, t, yes, on or 0, false, f, no,
// off, in any case.
func ParseBool(s string) (bool, error) {
	switch strings.ToLower(s) {
	case "1", "true", "t", "yes", "on":
		return true, nil
	case "0", "false", "f", "no", "off":
		return false, nil
	}
	return false, fmt.Errorf("want a boolean (true or false, 1 or 0, yes or no, on or off), got %q", s)
}

// ParseInt reads a whole number in base 10 of at least min.
func ParseInt(s string, min int64) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < min {
		return 0, fmt.Errorf("want %s, got %q", wholeNumber(min), s)
	}
	return n, nil
}

func wholeNumber(min int64) string {
	if min == 1 {
		return "a positive whole number"
	}
	return fmt.Sprintf("a whole number of at least %d", min)
}

// ParseDuration reads a positive duration: a Go duration ("90s", "10m")
// or a number of seconds ("600", "0.5").
func ParseDuration(s string) (time.Duration, error) {
	if n, err := strconv.ParseFloat(s, 64); err == nil {
		if n > 0 && !math.IsInf(n, 0) {
			return time.Duration(n * float64(time.Second)), nil
		}
	} else if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return d, nil
	}
	return 0, fmt.Errorf("want a positive duration such as 30s or 5m, got %q", s)
}

// FormatDuration writes d as a default is written: 24h, 30m, 1h30m, 10s,
// 500ms (time.Duration.String without its zero minutes and seconds).
func FormatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// ParseSize reads a number of bytes: a number, then optionally a space
// and a unit k, m, g, t or p (powers of 1024, in any case, "b" or "ib"
// may follow), or b alone. It accepts what Docker's RAMInBytes accepts.
func ParseSize(s string) (int64, error) {
	bad := fmt.Errorf("want a size such as 512m or 2g, got %q", s)
	end := strings.LastIndexAny(s, "0123456789. ")
	if end < 0 {
		return 0, bad
	}
	num, unit := s[:end+1], s[end+1:]
	if s[end] == ' ' {
		num = s[:end]
	}
	n, err := strconv.ParseFloat(num, 64)
	if err != nil || n < 0 {
		return 0, bad
	}
	unit = strings.ToLower(unit)
	if unit == "" || unit == "b" {
		return int64(n), nil
	}
	shift := strings.IndexByte("kmgtp", unit[0])
	if shift < 0 || (unit[1:] != "" && unit[1:] != "b" && unit[1:] != "ib") {
		return 0, bad
	}
	return int64(n * float64(int64(1)<<(10*(shift+1)))), nil
}

// ParseList reads a comma-separated list; items are trimmed and empty
// ones dropped.
func ParseList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

type value[T comparable] struct {
	p     *T
	parse func(string) (T, error)
}

func (v value[T]) Set(s string) error {
	x, err := v.parse(s)
	if err == nil {
		*v.p = x
	}
	return err
}

func (v value[T]) IsZero() bool {
	var zero T
	return *v.p == zero
}

// Bool fills p with ParseBool.
func Bool(p *bool) Value { return value[bool]{p, ParseBool} }

// String fills p with the value as it is.
func String(p *string) Value {
	return value[string]{p, func(s string) (string, error) { return s, nil }}
}

// Enum fills p with one of choices.
func Enum(p *string, choices ...string) Value {
	return value[string]{p, func(s string) (string, error) {
		if !slices.Contains(choices, s) {
			return "", fmt.Errorf("want %s, got %q", orList(choices), s)
		}
		return s, nil
	}}
}

func orList(choices []string) string {
	if len(choices) < 2 {
		return strings.Join(choices, "")
	}
	return strings.Join(choices[:len(choices)-1], ", ") + " or " + choices[len(choices)-1]
}

// Int fills p with a whole number of at least min.
func Int[T ~int | ~int64](p *T, min int64) Value {
	return IntOf(p, min, 1)
}

// IntOf fills p with a whole number of at least min, counted in unit: a
// number of seconds into a time.Duration (unit time.Second), of MiB into
// bytes (unit 1<<20).
func IntOf[T ~int | ~int64](p *T, min int64, unit T) Value {
	return value[T]{p, func(s string) (T, error) {
		n, err := ParseInt(s, min)
		return T(n) * unit, err
	}}
}

// Duration fills p with ParseDuration.
func Duration(p *time.Duration) Value { return value[time.Duration]{p, ParseDuration} }

// DurationMin fills p with a duration of at least min.
func DurationMin(p *time.Duration, min time.Duration) Value {
	return value[time.Duration]{p, func(s string) (time.Duration, error) {
		d, err := ParseDuration(s)
		if err != nil || d < min {
			return 0, fmt.Errorf("want a duration of at least %s, got %q", FormatDuration(min), s)
		}
		return d, nil
	}}
}

// SizeMin fills p with a size (ParseSize) of at least min bytes.
func SizeMin(p *int64, min int64) Value {
	return value[int64]{p, func(s string) (int64, error) {
		n, err := ParseSize(s)
		if err != nil || n < min {
			return 0, fmt.Errorf("want a size of at least %s such as 512m, got %q", formatSize(min), s)
		}
		return n, nil
	}}
}

func formatSize(n int64) string {
	for i, unit := range []string{"p", "t", "g", "m", "k"} {
		if m := int64(1) << (10 * (5 - i)); n >= m && n%m == 0 {
			return strconv.FormatInt(n/m, 10) + unit
		}
	}
	return strconv.FormatInt(n, 10)
}

// PositiveFloat fills p with a number greater than 0.
func PositiveFloat(p *float64) Value {
	return value[float64]{p, func(s string) (float64, error) {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || !(f > 0) || math.IsInf(f, 0) {
			return 0, fmt.Errorf("want a positive number such as 0.5, got %q", s)
		}
		return f, nil
	}}
}

type list struct{ p *[]string }

func (l list) Set(s string) error { *l.p = ParseList(s); return nil }
func (l list) IsZero() bool       { return len(*l.p) == 0 }

// List fills p with ParseList.
func List(p *[]string) Value { return list{p} }

type fn func(string) error

func (f fn) Set(s string) error { return f(s) }
func (fn) IsZero() bool         { return false }

// Func is a parser of the caller's: set parses the value and stores it.
// Its IsZero is always false: code that fills zero fields with their
// defaults leaves it alone.
func Func(set func(s string) error) Value { return fn(set) }
