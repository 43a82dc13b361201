package envconf

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// Every boolean takes the same spellings, in any case; anything else is
// an error naming the variable.
func TestBool(t *testing.T) {
	for _, s := range []string{"1", "true", "TRUE", "True", "t", "T", "yes", "Yes", "on", "ON"} {
		if b, err := ParseBool(s); !b || err != nil {
			t.Errorf("%q: %v %v", s, b, err)
		}
	}
	for _, s := range []string{"0", "false", "FALSE", "f", "F", "no", "NO", "off", "Off"} {
		if b, err := ParseBool(s); b || err != nil {
			t.Errorf("%q: %v %v", s, b, err)
		}
	}
	var b bool
	err := Load(env(map[string]string{"X_ON": "maybe"}), []Var{{Name: "X_ON", Default: "true", Value: Bool(&b)}})
	want := `config: X_ON: want a boolean (true or false, 1 or 0, yes or no, on or off), got "maybe"`
	if err == nil || err.Error() != want {
		t.Fatalf("got %v, want %s", err, want)
	}
	var e *Error
	if !errors.As(err, &e) || e.Name != "X_ON" {
		t.Fatalf("%#v", err)
	}
}

func TestDuration(t *testing.T) {
	for s, want := range map[string]time.Duration{"600": 600 * time.Second, "0.5": 500 * time.Millisecond, "10m": 10 * time.Minute, "1h30m": 90 * time.Minute, "300ms": 300 * time.Millisecond} {
		if d, err := ParseDuration(s); d != want || err != nil {
			t.Errorf("%q: %v %v, want %v", s, d, err, want)
		}
	}
	for _, s := range []string{"0", "-1", "0s", "-5m", "soon", "NaN", "Inf", "+Inf", "5 m"} {
		if d, err := ParseDuration(s); err == nil {
			t.Errorf("%q accepted: %v", s, d)
		}
	}
	var d time.Duration
	if err := DurationMin(&d, 12*time.Second).Set("10s"); err == nil || err.Error() != `want a duration of at least 12s, got "10s"` {
		t.Fatal(err)
	}
	for d, want := range map[time.Duration]string{24 * time.Hour: "24h", 720 * time.Hour: "720h", 30 * time.Minute: "30m", 90 * time.Minute: "1h30m",
		10 * time.Second: "10s", 500 * time.Millisecond: "500ms", time.Hour + time.Second: "1h0m1s"} {
		if got := FormatDuration(d); got != want {
			t.Errorf("FormatDuration(%v) = %q, want %q", d, got, want)
		}
		if back, err := ParseDuration(FormatDuration(d)); back != d || err != nil {
			t.Errorf("%v does not read back: %v %v", d, back, err)
		}
	}
}

func TestSizeIntList(t *testing.T) {
	for s, want := range map[string]int64{"512m": 512 << 20, "512M": 512 << 20, "1g": 1 << 30, "2GiB": 2 << 30, "1.5k": 1536, "100": 100, "100b": 100, "7 m": 7 << 20, "1kb": 1024} {
		if n, err := ParseSize(s); n != want || err != nil {
			t.Errorf("%q: %d %v, want %d", s, n, err, want)
		}
	}
	for _, s := range []string{"", "m", "-1m", "12x", "1mbb", "1mib2", "lots"} {
		if n, err := ParseSize(s); err == nil {
			t.Errorf("%q accepted: %d", s, n)
		}
	}
	var mem int64
	if err := SizeMin(&mem, 6<<20).Set("5m"); err == nil || err.Error() != `want a size of at least 6m such as 512m, got "5m"` {
		t.Fatal(err)
	}
	var n int
	if err := Int(&n, 1).Set("0"); err == nil || err.Error() != `want a positive whole number, got "0"` {
		t.Fatal(err)
	}
	var idle time.Duration
	if err := IntOf(&idle, 1, time.Second).Set("600"); err != nil || idle != 10*time.Minute {
		t.Fatal(idle, err)
	}
	if got := ParseList(" a, ,b ,"); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatal(got)
	}
	var mode string
	if err := Enum(&mode, "auto", "on", "off").Set("yes"); err == nil || err.Error() != `want auto, on or off, got "yes"` {
		t.Fatal(err)
	}
}

// Defaults go through the parser; required variables and ParseEmpty.
func TestLoad(t *testing.T) {
	var c struct {
		url   string
		n     int
		d     time.Duration
		empty string
		calls int
	}
	vars := []Var{
		{Name: "URL", Required: true, Value: String(&c.url)},
		{Name: "N", Default: "10", Value: Int(&c.n, 1)},
		{Name: "D", Default: "30s", Value: Duration(&c.d)},
		{Name: "E", ParseEmpty: true, Value: Func(func(s string) error { c.empty, c.calls = s, c.calls+1; return nil })},
		{Name: "ELSEWHERE", Doc: "read by its user"},
	}
	if err := Load(env(nil), vars); err == nil || err.Error() != "config: URL: required" || !errors.Is(err, ErrRequired) {
		t.Fatal(err)
	}
	vars[0].Doc = "where it is"
	if err := Load(env(nil), vars); err == nil || err.Error() != "config: URL: required (where it is)" || !errors.Is(err, ErrRequired) {
		t.Fatal(err)
	}
	if err := Load(env(map[string]string{"URL": "u", "D": "5m"}), vars); err != nil || c.url != "u" || c.n != 10 || c.d != 5*time.Minute || c.calls != 1 {
		t.Fatalf("%+v %v", c, err)
	}
	c.n = 0
	if v := Lookup(vars, "N"); !v.Value.IsZero() || v.SetDefault() != nil || c.n != 10 {
		t.Fatal(c.n)
	}
}

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
