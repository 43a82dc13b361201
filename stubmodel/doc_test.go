package stubmodel

import (
	"os"
	"strings"
	"testing"
)

// The script of docs/run-by-hand.md, the stub's format as written for
// people, loads as it is written.
func TestRunByHandScriptLoads(t *testing.T) {
	b, err := os.ReadFile("../docs/run-by-hand.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "### The stub's script")
	if !ok {
		t.Fatal("docs/run-by-hand.md has no section on the stub's script")
	}
	_, rest, ok = strings.Cut(rest, "```json\n")
	if !ok {
		t.Fatal("the stub's script section has no json block")
	}
	block, _, _ := strings.Cut(rest, "\n```")
	s, err := LoadScript([]byte(block))
	if err != nil {
		t.Fatalf("the documented script: %v", err)
	}
	if len(s.Steps) != 4 || s.Fallback == nil || s.Steps[2].Error == nil || s.Steps[0].ToolUse == nil {
		t.Fatalf("the documented script loaded as %+v", s)
	}
}
