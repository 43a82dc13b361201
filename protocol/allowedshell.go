package protocol

import (
	"slices"
	"strings"
)

// The shell commands that command names stand for. A worker's agent runs
// an orchestrator command from its shell tool: the command name's dotted
// segments are the first words of the shell command ("engineering.deploy"
// is `engineering deploy --env prod`, "git.push" is `git push`). The one
// exception is the runtime's own progress call, worker.progress, which is
// `worker-wrapper progress ...`. The wrapper hands these prefixes to the
// agent CLI's permission controls (wrapper/README.md says how for each).

// progressShellWords are the first words of the progress call.
var progressShellWords = []string{"worker-wrapper", "progress"}

// shellWords returns the first words of the shell command that command
// stands for.
func shellWords(command string) []string {
	if command == ProgressCommand {
		return slices.Clone(progressShellWords)
	}
	return strings.Split(command, ".")
}

// ShellRules is what a set of patterns allows, as shell command prefixes.
type ShellRules struct {
	// All: every shell command ("*").
	All bool
	// Prefixes: a command whose words begin with one of these runs. A
	// pattern "a.b" gives ["a" "b"], "a.*" gives ["a"] (which also admits
	// the bare word a: no agent CLI can say "a and at least one word").
	Prefixes [][]string
}

// ShellRules returns the shell prefixes a allows. The progress call is
// always among them: it is the runtime's own channel, never governed by
// ALLOWED_COMMANDS.
func (a AllowedCommands) ShellRules() ShellRules {
	r := ShellRules{All: a.all, Prefixes: [][]string{slices.Clone(progressShellWords)}}
	names := make([]string, 0, len(a.exact))
	for n := range a.exact {
		if n != ProgressCommand {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	for _, n := range names {
		r.Prefixes = append(r.Prefixes, shellWords(n))
	}
	for _, p := range a.prefixes {
		r.Prefixes = append(r.Prefixes, strings.Split(strings.TrimSuffix(p, "."), "."))
	}
	return r
}

// AllowsShell reports whether the shell command line may run under a (the
// progress call always may). Only a simple command is judged: plain words,
// single or double quotes; any other shell syntax (;, &, |, redirections,
// $, backquotes, parentheses, newlines, a backslash) is refused unless a
// allows everything, since no prefix can vouch for what follows it.
func (a AllowedCommands) AllowsShell(line string) bool {
	if a.all {
		return true
	}
	words, ok := simpleCommandWords(line)
	if !ok || len(words) == 0 {
		return false
	}
	for _, p := range a.ShellRules().Prefixes {
		if len(words) >= len(p) && slices.Equal(words[:len(p)], p) {
			return true
		}
	}
	return false
}

// simpleCommandWords splits a simple shell command into its words; ok is
// false when the line has anything but words and quotes (a backslash
// outside single quotes too).
func simpleCommandWords(line string) (words []string, ok bool) {
	words, ok = splitShell(line, false)
	if !ok || (len(words) > 0 && strings.Contains(words[0], "=")) { // FOO=1 cmd: an assignment first
		return nil, false
	}
	return words, true
}

// ShellWords splits line into words as a POSIX shell reads them: blanks
// part words, single quotes keep everything, double quotes keep all but a
// backslash before $ ` " or \, a backslash outside quotes keeps the next
// character. ok is false for an unterminated quote, a backslash before a
// line break or at the end, an expansion in double quotes ($ or `
// unescaped), and any other shell syntax outside quotes (; & | < > ( ) $
// ` and line breaks): such a line is no plain list of words.
func ShellWords(line string) (words []string, ok bool) { return splitShell(line, true) }

// splitShell is ShellWords; without escapes a backslash outside single
// quotes makes ok false.
func splitShell(line string, escapes bool) (words []string, ok bool) {
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(line); i++ {
		switch c := line[i]; {
		case c == ' ' || c == '\t':
			if inWord {
				words, inWord = append(words, cur.String()), false
				cur.Reset()
			}
		case c == '\\':
			if !escapes || i+1 == len(line) || line[i+1] == '\n' {
				return nil, false
			}
			i++
			cur.WriteByte(line[i])
			inWord = true
		case c == '\'':
			j := strings.IndexByte(line[i+1:], '\'')
			if j < 0 {
				return nil, false
			}
			cur.WriteString(line[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '"':
			end, ok := doubleQuoted(line, i+1, escapes, &cur)
			if !ok {
				return nil, false
			}
			i, inWord = end, true
		case strings.IndexByte(";&|<>()$`\n\r", c) >= 0:
			return nil, false
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, true
}

// doubleQuoted reads a double-quoted string from line[start:] into cur
// and returns the index of its closing quote; ok is false when it does
// not close, or holds an unescaped $ or ` (an expansion), a backslash
// before a line break, or (without escapes) any backslash.
func doubleQuoted(line string, start int, escapes bool, cur *strings.Builder) (end int, ok bool) {
	for i := start; i < len(line); i++ {
		switch c := line[i]; {
		case c == '"':
			return i, true
		case c == '$' || c == '`' || (c == '\\' && !escapes):
			return 0, false
		case c == '\\' && i+1 < len(line) && strings.IndexByte("$`\"\\", line[i+1]) >= 0:
			i++
			cur.WriteByte(line[i])
		case c == '\\' && i+1 < len(line) && line[i+1] == '\n':
			return 0, false
		default:
			cur.WriteByte(c)
		}
	}
	return 0, false
}
