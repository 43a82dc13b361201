package envconf

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// A table renders as a row per variable, "|" escaped; its section of a
// document is replaced between the markers, and nothing else; a
// difference is shown row by row.
func TestMarkdownSection(t *testing.T) {
	vars := []Var{
		{Name: "A", Required: true, Doc: "the `A`, see [x](x.md)"},
		{Name: "B", Default: "10s"},
		{Name: "C", DefaultDoc: "`1` or `0`", Doc: "a|b"},
		{Name: "D", Default: "720h"},
		{Name: "E", Default: "24h"},
	}
	table := Markdown(vars)
	wantTable := "| Variable | Default | Meaning |\n|---|---|---|\n" +
		"| `A` | (required) | the `A`, see [x](x.md) |\n" +
		"| `B` | `10s` | |\n" +
		"| `C` | `1` or `0` | a\\|b |\n" +
		"| `D` | `720h` (30 days) | |\n" +
		"| `E` | `24h` | |\n"
	if table != wantTable {
		t.Fatalf("table\n%s\nwant\n%s", table, wantTable)
	}
	doc := "# t\n\n" + Marker("bin") + "\n| old |\n" + EndMarker("bin") + "\n\ntext\n" + Marker("other") + "\n" + EndMarker("other") + "\n"
	if s, err := Section(doc, "bin"); err != nil || s != "| old |\n" {
		t.Fatalf("section %q %v", s, err)
	}
	got, err := ReplaceSection(doc, "bin", table)
	if err != nil || got != "# t\n\n"+Marker("bin")+"\n"+table+EndMarker("bin")+"\n\ntext\n"+Marker("other")+"\n"+EndMarker("other")+"\n" {
		t.Fatalf("replaced %v\n%s", err, got)
	}
	for name, bad := range map[string]string{
		"none":       "# t\n",
		"no end":     Marker("bin") + "\n| x |\n",
		"end first":  EndMarker("bin") + "\n" + Marker("bin") + "\n",
		"twice":      Marker("bin") + "\n" + EndMarker("bin") + "\n" + Marker("bin") + "\n" + EndMarker("bin") + "\n",
		"other only": Marker("other") + "\n" + EndMarker("other") + "\n",
	} {
		if _, err := Section(bad, "bin"); !errors.Is(err, ErrNoSection) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if d := LineDiff("a\nb\nc\n", "a\nB\nc\nd\n"); d != "- b\n+ B\n+ d\n" {
		t.Fatalf("diff %q", d)
	}
}

// SyncFile reports a section that differs and, asked to, rewrites it.
func TestSyncFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "configuration.md")
	vars := []Var{{Name: "A", Default: "1", Doc: "a"}}
	old := "top\n" + Marker("bin") + "\n| stale |\n" + EndMarker("bin") + "\nbottom\n"
	if err := os.WriteFile(path, []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	if d, err := SyncFile(path, "bin", vars, false); err != nil || d != "- | stale |\n+ | Variable | Default | Meaning |\n+ |---|---|---|\n+ | `A` | `1` | a |\n" {
		t.Fatalf("diff %q %v", d, err)
	}
	if b, _ := os.ReadFile(path); string(b) != old {
		t.Fatal("checking wrote the file")
	}
	if d, err := SyncFile(path, "bin", vars, true); err != nil || d == "" {
		t.Fatalf("update: %q %v", d, err)
	}
	if b, _ := os.ReadFile(path); string(b) != "top\n"+Marker("bin")+"\n"+Markdown(vars)+EndMarker("bin")+"\nbottom\n" {
		t.Fatalf("rewritten:\n%s", b)
	}
	if d, err := SyncFile(path, "bin", vars, false); err != nil || d != "" {
		t.Fatalf("after the update: %q %v", d, err)
	}
	if _, err := SyncFile(path, "other", vars, false); !errors.Is(err, ErrNoSection) {
		t.Fatal(err)
	}
}
