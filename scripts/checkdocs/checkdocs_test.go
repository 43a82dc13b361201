package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestFences(t *testing.T) {
	for _, tt := range []struct {
		name string
		doc  string
		want int // problems
	}{
		{"closed", "a\n```go\nx\n```\nb\n", 0},
		{"text after the closing fence", "```go\nx\n``` Runnable examples\ntext\n", 1},
		{"never closed", "```\nx\n", 1},
		{"tildes hold backticks", "~~~~\n```\nnot a close\n~~~~\n", 0},
		{"a longer fence holds a shorter", "````\n```\n````\n", 0},
		{"a skip marker without a reason", "<!-- checkdocs: skip -->\n```go\nx\n```\n", 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := parse("x.md", tt.doc).fences; len(got) != tt.want {
				t.Errorf("%q: %v, want %d problems", tt.doc, got, tt.want)
			}
		})
	}
}

func TestAnchors(t *testing.T) {
	d := parse("x.md", "# The `worker-gateway`: its sockets\n## Fleet: hosts, placement\n## Fleet: hosts, placement\n```\n# not a heading\n```\n<a id=\"by-hand\"></a>\n#not-a-heading\n")
	want := []string{"by-hand", "fleet-hosts-placement", "fleet-hosts-placement-1", "the-worker-gateway-its-sockets"}
	var got []string
	for a := range d.anchors {
		got = append(got, a)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("anchors %v, want %v", got, want)
	}
}

func TestSkipMarker(t *testing.T) {
	d := parse("x.md", "<!-- checkdocs: skip: a sketch of a planned interface -->\n```go\ntype Engine interface{}\n```\n")
	if len(d.blocks) != 1 || d.blocks[0].skip != "a sketch of a planned interface" || d.blocks[0].lang != "go" {
		t.Fatalf("%+v", d.blocks)
	}
}

// A broken link, a missing anchor and a link out of the repository are
// each reported at their line; links in code are not links.
func TestLinks(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{
		"README.md": "# Top\n[ok](docs/a.md#section-one) [dir](docs/)\n[gone](docs/missing.md)\n" +
			"[bad anchor](docs/a.md#nowhere)\n`[in code](nowhere.md)`\n```\n[in a block](nowhere.md)\n```\n[self](#top) [up](../x.md)\n[ref]: docs/b.md\n",
		"docs/a.md": "# A\n## Section one\n[back](../README.md#top)\n",
	}
	for p, text := range files {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r, err := newRun(root)
	if err != nil {
		t.Fatal(err)
	}
	r.checkLinks()
	got := strings.Join(r.problems, "\n")
	for _, want := range []string{
		"README.md:3: link docs/missing.md: no such file",
		"README.md:4: link docs/a.md#nowhere: no heading",
		"README.md:9: link ../x.md: leaves the repository",
		"README.md:10: link docs/b.md: no such file",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no %q in\n%s", want, got)
		}
	}
	if len(r.problems) != 4 {
		t.Errorf("%d problems, want 4:\n%s", len(r.problems), got)
	}
}
