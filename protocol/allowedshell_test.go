package protocol

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestAllowsShell(t *testing.T) {
	runAllowCases(t, []allowCase{
		{"empty allows only progress", nil,
			[]string{`worker-wrapper progress --step "Running tests" --pct 50`, "worker-wrapper progress"},
			[]string{"ls", "git status", "worker-wrapper", "worker-wrapper progressx", "worker-wrapper progress; rm -rf x"}},
		{"exact", []string{"engineering.deploy"},
			[]string{"engineering deploy", "engineering deploy --env 'prod'", `engineering  deploy "a b"`, "engineering deploy --env=prod"},
			[]string{"engineering", "engineering deployx", "engineeringx deploy", "FOO=1 engineering deploy",
				"engineering deploy $(id)", "engineering deploy `id`", `engineering deploy "$HOME"`, "engineering deploy && id",
				"engineering deploy | sh", "engineering deploy > f", "engineering deploy\nid", "engineering deploy 'unterminated"}},
		{"prefix", []string{"git.*"},
			[]string{"git push origin main", "git", "git status"},
			[]string{"gitx status", "go test ./..."}},
		{"star", []string{"*"}, []string{"anything; at all | really"}, nil},
	}, AllowedCommands.AllowsShell)
}

func TestShellRules(t *testing.T) {
	a, err := ParseAllowedCommands([]string{"project.get", "engineering.*", "worker.progress"})
	if err != nil {
		t.Fatal(err)
	}
	r := a.ShellRules()
	var got []string
	for _, p := range r.Prefixes {
		got = append(got, strings.Join(p, " "))
	}
	want := []string{"worker-wrapper progress", "project get", "engineering"}
	if r.All || !slices.Equal(got, want) {
		t.Fatalf("rules %v (all %v), want %v", got, r.All, want)
	}
	if w := shellWords("worker.progress"); !slices.Equal(w, []string{"worker-wrapper", "progress"}) {
		t.Errorf("progress words %v", w)
	}
}

func TestProgressRefusal(t *testing.T) {
	base := Progress{WorkerID: "w", RequestID: "r", Step: "refused: Bash rm -rf /", Level: LevelWarning,
		Refused: &Refusal{Tool: "Bash", Command: "rm -rf /", Reason: "not in ALLOWED_COMMANDS"}, Timestamp: time.Now()}
	doc, err := base.Encode()
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeProgress(doc)
	if err != nil || back.Refused == nil || back.Refused.Command != "rm -rf /" {
		t.Fatalf("round trip: %+v, %v", back, err)
	}
	info := base
	info.Level = LevelInfo
	if err := info.Validate(); err == nil {
		t.Error("a refusal at level info was accepted")
	}
	long := base
	long.Refused = &Refusal{Tool: "Bash", Command: strings.Repeat("x", MaxRefusedCommandBytes+1)}
	if err := long.Validate(); err == nil {
		t.Error("an over-long refused command was accepted")
	}
}

func TestSpecInstructionsLimit(t *testing.T) {
	s := WorkerSpec{AgentType: AgentClaude, Instructions: strings.Repeat("x", MaxInstructionsBytes)}
	if err := s.Validate(); err != nil {
		t.Fatalf("instructions at the limit: %v", err)
	}
	s.Instructions += "x"
	err := s.Validate()
	if err == nil || !strings.Contains(err.Error(), "spec.instructions") {
		t.Fatalf("instructions over the limit: %v", err)
	}
}

// FuzzAllowsShell: a command line from the agent never panics the
// matcher, and one it allows under a list (not "*") holds no shell syntax
// that would run or redirect anything (outside quotes, or expanding inside
// double quotes): nothing can ride behind an allowed prefix.
func FuzzAllowsShell(f *testing.F) {
	for _, s := range []string{`engineering deploy --env 'prod'`, `worker-wrapper progress --step "a b" --pct 5`,
		`engineering deploy; id`, `engineering deploy "$(id)"`, `engineering deploy 'a;b'`, `engineering deploy "x`, "FOO=1 engineering deploy"} {
		f.Add(s)
	}
	a, err := ParseAllowedCommands([]string{"engineering.deploy", "git.*"})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, line string) {
		if !a.AllowsShell(line) {
			return
		}
		quote := rune(0)
		for _, c := range line {
			switch {
			case quote == 0 && (c == '\'' || c == '"'):
				quote = c
			case quote != 0 && c == quote:
				quote = 0
			case quote == 0 && strings.ContainsRune(";&|<>$`\\\n\r()", c),
				quote == '"' && strings.ContainsRune("$`\\", c):
				t.Fatalf("allowed %q, which holds shell syntax (%q)", line, c)
			}
		}
		if quote != 0 {
			t.Fatalf("allowed %q, whose quote is not closed", line)
		}
	})
}

// ShellWords reads quotes and backslashes as a POSIX shell does, and
// refuses a line with any other shell syntax.
func TestShellWords(t *testing.T) {
	for _, tt := range []struct {
		line string
		want []string // nil: not ok
	}{
		{`a  b	c`, []string{"a", "b", "c"}},
		{`'a b' "c d" e\ f`, []string{"a b", "c d", "e f"}},
		{`'it'\''s' "say \"hi\" \$x \\ \z"`, []string{"it's", `say "hi" $x \ \z`}},
		{`/bin/bash -c "echo 'it'\"'\"'s'"`, []string{"/bin/bash", "-c", `echo 'it'"'"'s'`}},
		{`''`, []string{""}},
		{``, []string{}},
		{`a; b`, nil}, {`a | b`, nil}, {`a > f`, nil}, {`$(id)`, nil}, {"`id`", nil}, {`"$HOME"`, nil},
		{`'open`, nil}, {`"open`, nil}, {`a\`, nil}, {"a\\\nb", nil}, {"a\nb", nil}, {`(a)`, nil},
	} {
		got, ok := ShellWords(tt.line)
		if ok != (tt.want != nil) || (ok && !slices.Equal(got, tt.want) && !(len(got) == 0 && len(tt.want) == 0)) {
			t.Errorf("ShellWords(%q) = %q, %v; want %q", tt.line, got, ok, tt.want)
		}
	}
}

// FuzzShellWords: whatever the line, ShellWords does not panic, and the
// words it reads, each single-quoted again, read back the same.
func FuzzShellWords(f *testing.F) {
	for _, s := range []string{`/bin/bash -c 'echo hi'`, `/bin/bash -c "a \"b\" 'c'"`, `a\ b 'c d' "e\\f"`, `"$x"`, `'`, `\`, "a\nb"} {
		f.Add(s)
	}
	quote := func(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
	f.Fuzz(func(t *testing.T, line string) {
		words, ok := ShellWords(line)
		if !ok {
			return
		}
		quoted := make([]string, len(words))
		for i, w := range words {
			quoted[i] = quote(w)
		}
		if again, ok := ShellWords(strings.Join(quoted, " ")); !ok || !slices.Equal(again, words) {
			t.Fatalf("%q: words %q, quoted again %q (%v)", line, words, again, ok)
		}
	})
}
