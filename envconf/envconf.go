// Package envconf reads a binary's configuration from its environment
// through one table of variables, each written once: its name, its
// default, its parser, one line of documentation and the field it fills.
//
// Every binary uses it: worker-manager (spawner.ConfigFromEnv and
// spawner.OpsConfigFromEnv), worker-wrapper (worker.FromEnv) and
// worker-gateway (gateway/cmd/worker-gateway). It is a
// module of its own, at the root of the repository and on the standard
// library only, so that the wrapper and the spawner share it without
// either importing the other or gaining a dependency; protocol, the
// contract between processes, is no place for how a binary reads its
// environment.
//
// One parser per kind of value serves every variable of that kind:
//
//   - Bool: 1, true, t, yes, on and 0, false, f, no, off, in any case.
//   - Int: a whole number in base 10, with a minimum (and a unit for
//     variables counted in seconds or MiB).
//   - Duration: a Go duration (90s, 10m, 1h30m) or a number of seconds
//     (600, 0.5); positive.
//   - Size: bytes with an optional binary unit (512m, 1g, 2GiB, 100000).
//   - Float, List (comma-separated, blanks dropped), String, Enum.
//   - Func: a parser of the caller's (JSON, a URL, a protocol type).
//
// A bad value is an error that names the variable: "config: NAME: want
// ..., got "value"". An unset or empty variable takes its default, which
// goes through the same parser as a value that is set; a variable with
// neither leaves its field zero.
//
// The tables are the documentation too: Markdown renders one as the
// table of the configuration reference (docs/configuration.md), SyncFile
// keeps a binary's section of that file equal to it, and Usage prints it
// as a binary's --help.
package envconf

import (
	"errors"
	"fmt"
)

// Var is one environment variable of a binary's table.
type Var struct {
	Name string
	// Default is the value an unset variable takes, parsed like a set one
	// ("" for none).
	Default string
	// DefaultDoc is the default as the documentation states it, for a
	// default the code derives (from another variable, the host, a
	// constant of another package), in Markdown like Doc; "" when
	// Default says it.
	DefaultDoc string
	// Required makes an unset variable an error, which quotes Doc.
	Required bool
	// ParseEmpty calls Value.Set("") for an unset variable without a
	// default: for parsers whose empty value means something (the
	// built-in price table, an empty set of labels).
	ParseEmpty bool
	// Doc says what the variable does, in Markdown: it is the Meaning of
	// the variable's row in docs/configuration.md (Markdown), so its links
	// are relative to docs/. --help (Usage) and the error of a required
	// variable show it as plain text (Plain). One paragraph; "|" is
	// escaped for the table.
	Doc string
	// Value parses the variable into its field. nil: the variable is read
	// elsewhere (Doc says where); it is in the table to be documented.
	Value Value
}

// Value is where a variable's parser stores what it read.
type Value interface {
	// Set parses s and stores it; its error says what is wanted and what
	// was got, without the variable's name (Load adds it).
	Set(s string) error
	// IsZero reports whether the field holds its zero value.
	IsZero() bool
}

// ErrRequired is the error of a required variable left unset.
var ErrRequired = errors.New("required")

// Error is a variable's bad value.
type Error struct {
	Name string
	Err  error
}

func (e *Error) Error() string { return "config: " + e.Name + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Errorf returns the error of variable name, as Load returns it: for the
// checks a caller makes across variables.
func Errorf(name, format string, a ...any) error {
	return &Error{Name: name, Err: fmt.Errorf(format, a...)}
}

// Load reads every variable of vars from getenv, in order, and stops at
// the first bad one.
func Load(getenv func(string) string, vars []Var) error {
	for _, v := range vars {
		if err := v.load(getenv(v.Name)); err != nil {
			return &Error{Name: v.Name, Err: err}
		}
	}
	return nil
}

func (v Var) load(s string) error {
	if s == "" {
		if v.Required && v.Doc != "" {
			return fmt.Errorf("%w (%s)", ErrRequired, Plain(v.Doc))
		} else if v.Required {
			return ErrRequired
		}
		s = v.Default
	}
	if v.Value == nil || (s == "" && !v.ParseEmpty) {
		return nil
	}
	return v.Value.Set(s)
}

// SetDefault stores v's default in its field (for a Config built in Go
// rather than read from the environment).
func (v Var) SetDefault() error {
	if v.Value == nil {
		return nil
	}
	if err := v.load(""); err != nil {
		return &Error{Name: v.Name, Err: err}
	}
	return nil
}

// Lookup returns the variable called name; it panics when vars has none,
// as only a mistake in the code can ask for one.
func Lookup(vars []Var, name string) Var {
	for _, v := range vars {
		if v.Name == name {
			return v
		}
	}
	panic("envconf: no variable " + name)
}
