package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/agentvisor/agentvisor/protocol"
)

// An output's git result shows where the work went, its commits, its
// diffstat and whether it merges; a task that changed nothing says so.
func TestRenderOutputShowsGit(t *testing.T) {
	no := false
	o := protocol.Output{Status: protocol.StatusComplete, Git: &protocol.GitOutput{
		Remote: "https://git.example.test/shop/api.git", Branch: "agentvisor/T-1", Base: "main", Changed: true, Pushed: true,
		StartCommit: strings.Repeat("a", 40), HeadCommit: strings.Repeat("b", 40), BaseHead: strings.Repeat("c", 40),
		Commits:    []protocol.GitCommit{{SHA: strings.Repeat("b", 40), Subject: "Fix the cart"}},
		Files:      []protocol.GitFileStat{{Path: "cart.go", Insertions: 3, Deletions: 1}, {Path: "logo.png", Binary: true}},
		Insertions: 3, Deletions: 1, MergesCleanly: &no, Conflicts: []string{"cart.go"},
	}}
	var b bytes.Buffer
	if err := renderOutput(&b, o); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"https://git.example.test/shop/api.git, branch agentvisor/T-1 from main (pushed)",
		"aaaaaaaaaaaa..bbbbbbbbbbbb, 1", "bbbbbbbbbbbb Fix the cart", "2 files, +3 -1", "cart.go +3 -1", "logo.png (binary)",
		"conflicts with main: cart.go (which moved to cccccccccccc)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in\n%s", want, b.String())
		}
	}
	o.Git = &protocol.GitOutput{Remote: "r", Branch: "b", Base: "main", HeadCommit: strings.Repeat("a", 40)}
	b.Reset()
	if err := renderOutput(&b, o); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "none: the branch is as the task found it") || !strings.Contains(b.String(), "(not pushed)") {
		t.Errorf("unchanged:\n%s", b.String())
	}
}
