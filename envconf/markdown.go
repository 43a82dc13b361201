package envconf

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Marker precedes a Markdown table of a binary's variables, on the line
// before its header: "<!-- envconf: worker-manager -->". It renders as
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

// CheckMarkdown compares every table of doc marked for binary (Marker)
// with vars and returns what differs, one line each: a variable of vars
// the table lacks, a variable of the table vars lacks, a default stated
// otherwise (a row's default may go on with " (" or ": " and an
// explanation). A row may list several variables ("`A`, `B`") with their
// defaults in the same order, separated by ";" or ",". It also reports
// a table of variables (header "| Variable | Default |") that no marker
// names, and a doc with no table for binary.
func CheckMarkdown(doc, binary string, vars []Var) []string {
	var problems []string
	lines := strings.Split(doc, "\n")
	tables := 0
	for i, line := range lines {
		if strings.HasPrefix(line, "| Variable | Default |") && (i == 0 || !strings.HasPrefix(lines[i-1], "<!-- envconf: ")) {
			problems = append(problems, fmt.Sprintf("line %d: a table of variables without a marker", i+1))
		}
		if strings.TrimSpace(line) != Marker(binary) {
			continue
		}
		tables++
		var rows []string
		for _, row := range lines[min(i+3, len(lines)):] {
			if !strings.HasPrefix(row, "|") {
				break
			}
			rows = append(rows, row)
		}
		for _, p := range checkTable(rows, vars) {
			problems = append(problems, fmt.Sprintf("table at line %d: %s", i+2, p))
		}
	}
	if tables == 0 {
		problems = append(problems, "no table marked "+Marker(binary))
	}
	return problems
}

func checkTable(rows []string, vars []Var) []string {
	var problems []string
	documented := map[string]string{} // name → its default cell
	for _, row := range rows {
		cells := strings.SplitN(strings.TrimPrefix(row, "|"), "|", 3)
		if len(cells) < 3 {
			problems = append(problems, fmt.Sprintf("row %q: want | Variable | Default | Meaning |", row))
			continue
		}
		names := strings.Split(strings.TrimSpace(cells[0]), ", ")
		defaults, ok := splitDefaults(strings.TrimSpace(cells[1]), len(names))
		if !ok {
			problems = append(problems, fmt.Sprintf("row %q: %d variables, want as many defaults separated by \";\" or \",\"", row, len(names)))
			continue
		}
		for j, n := range names {
			n = strings.Trim(n, "`")
			if _, dup := documented[n]; dup {
				problems = append(problems, n+": listed twice")
			}
			documented[n] = defaults[j]
		}
	}
	known := map[string]bool{}
	for _, v := range vars {
		known[v.Name] = true
		cell, ok := documented[v.Name]
		want := v.DocDefault()
		switch {
		case !ok:
			problems = append(problems, v.Name+": missing")
		case cell != want && (want == "" || !strings.HasPrefix(cell, want+" (") && !strings.HasPrefix(cell, want+": ")):
			problems = append(problems, fmt.Sprintf("%s: default %q, the code's is %q", v.Name, cell, want))
		}
	}
	for _, n := range slices.Sorted(maps.Keys(documented)) {
		if !known[n] {
			problems = append(problems, n+": documented, but not in the code's table")
		}
	}
	return problems
}

// splitDefaults splits the default cell of a row of n variables.
func splitDefaults(cell string, n int) ([]string, bool) {
	if n == 1 {
		return []string{cell}, true
	}
	if cell == "" {
		return make([]string, n), true
	}
	for _, sep := range []string{";", ","} {
		if parts := strings.Split(cell, sep); len(parts) == n {
			for i := range parts {
				parts[i] = strings.TrimSpace(parts[i])
			}
			return parts, true
		}
	}
	return nil, false
}
