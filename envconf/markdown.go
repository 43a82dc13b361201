package envconf

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// The configuration reference (docs/configuration.md) is generated from
// the tables: each binary's section, between Marker and EndMarker, is
// Markdown(vars) and nothing else. A test of each binary's package
// compares the section with its table (SyncFile) and rewrites it when
// asked; nobody edits the section by hand.

// Marker opens the section of a binary's table in a Markdown file, on
// a line of its own: "<!-- envconf: worker-manager -->". It renders as
// nothing.
func Marker(binary string) string { return "<!-- envconf: " + binary + " -->" }

// DocDefault is v's default as a table of variables states it:
// "(required)", DefaultDoc, or Default in backquotes ("" for none), a
// Go duration of whole days said in days too ("`720h` (30 days)").
func (v Var) DocDefault() string {
	switch {
	case v.Required:
		return "(required)"
	case v.DefaultDoc != "":
		return v.DefaultDoc
	case v.Default != "":
		const day = 24 * time.Hour
		if d, err := time.ParseDuration(v.Default); err == nil && d >= 2*day && d%day == 0 {
			return fmt.Sprintf("`%s` (%d days)", v.Default, d/day)
		}
		return "`" + v.Default + "`"
	}
	return ""
}

// EndMarker closes the section of a binary's table that Marker opens.
func EndMarker(binary string) string { return "<!-- /envconf: " + binary + " -->" }

// Markdown is the table of vars as the reference shows it: a row per
// variable, in the table's order, with its name, its default as
// DocDefault states it and its Doc. A "|" in a default or a Doc is
// escaped, so that Doc may quote one.
func Markdown(vars []Var) string {
	var b strings.Builder
	b.WriteString("| Variable | Default | Meaning |\n|---|---|---|\n")
	for _, v := range vars {
		b.WriteString(row("`"+v.Name+"`", v.DocDefault(), v.Doc))
	}
	return b.String()
}

// row is one line of a table: "| a | | c |" for cells a, "" and c.
func row(cells ...string) string {
	var b strings.Builder
	b.WriteString("|")
	for _, c := range cells {
		c = strings.ReplaceAll(strings.ReplaceAll(c, "\n", " "), "|", `\|`)
		if c != "" {
			b.WriteString(" " + c)
		}
		b.WriteString(" |")
	}
	b.WriteString("\n")
	return b.String()
}

// ErrNoSection is the error of a document without a section marked for
// the binary (or with one that never ends, or with two).
var ErrNoSection = errors.New("envconf: no section between the markers")

// section returns where binary's section of doc starts and ends (the
// byte offsets just after the line of Marker and at the start of the
// line of EndMarker).
func section(doc, binary string) (start, end int, err error) {
	begin, stop := Marker(binary), EndMarker(binary)
	start, end = -1, -1
	off := 0
	for _, line := range strings.SplitAfter(doc, "\n") {
		switch strings.TrimSpace(line) {
		case begin:
			if start >= 0 {
				return 0, 0, fmt.Errorf("%w: %s twice", ErrNoSection, begin)
			}
			start = off + len(line)
		case stop:
			if start < 0 || end >= 0 {
				return 0, 0, fmt.Errorf("%w: %s out of place", ErrNoSection, stop)
			}
			end = off
		}
		off += len(line)
	}
	if start < 0 || end < 0 {
		return 0, 0, fmt.Errorf("%w: want a line %s, the table, then a line %s", ErrNoSection, begin, stop)
	}
	return start, end, nil
}

// Section returns binary's section of doc: the lines between its
// markers.
func Section(doc, binary string) (string, error) {
	start, end, err := section(doc, binary)
	if err != nil {
		return "", err
	}
	return doc[start:end], nil
}

// ReplaceSection returns doc with binary's section replaced by text.
func ReplaceSection(doc, binary, text string) (string, error) {
	start, end, err := section(doc, binary)
	if err != nil {
		return "", err
	}
	return doc[:start] + text + doc[end:], nil
}

// SyncFile holds binary's section of the Markdown file at path to
// Markdown(vars). It returns the difference between the two, a line per
// row that differs ("" when none): "-" before the file's row, "+"
// before the code's. With update it also rewrites the section to the
// code's.
func SyncFile(path, binary string, vars []Var, update bool) (diff string, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	doc := string(b)
	have, err := Section(doc, binary)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	want := Markdown(vars)
	if have == want {
		return "", nil
	}
	diff = LineDiff(have, want)
	if update {
		doc, _ = ReplaceSection(doc, binary, want) // Section found it
		fi, err := os.Stat(path)
		if err != nil {
			return diff, err
		}
		if err := os.WriteFile(path, []byte(doc), fi.Mode().Perm()); err != nil {
			return diff, err
		}
	}
	return diff, nil
}

// LineDiff lists the lines that differ between a and b, in order: "- "
// before a line only a has, "+ " before one only b has. The lines both
// keep in the same order (a longest common subsequence) are left out.
func LineDiff(a, b string) string {
	x, y := strings.Split(a, "\n"), strings.Split(b, "\n")
	// lcs[i][j] is the length of the longest common subsequence of x[i:]
	// and y[j:]; tables are tens of lines, so the square is small.
	lcs := make([][]int, len(x)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(y)+1)
	}
	for i := len(x) - 1; i >= 0; i-- {
		for j := len(y) - 1; j >= 0; j-- {
			if x[i] == y[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var d strings.Builder
	i, j := 0, 0
	for i < len(x) || j < len(y) {
		switch {
		case i < len(x) && j < len(y) && x[i] == y[j]:
			i, j = i+1, j+1
		case j == len(y) || i < len(x) && lcs[i+1][j] >= lcs[i][j+1]:
			d.WriteString("- " + x[i] + "\n")
			i++
		default:
			d.WriteString("+ " + y[j] + "\n")
			j++
		}
	}
	return d.String()
}
