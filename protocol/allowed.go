package protocol

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// AllowedCommands decides which commands a worker may run (progress calls,
// orchestrator CLI commands). Patterns are dotted names ("project.get"), a
// prefix ending in ".*" ("engineering.*", which matches every command below
// engineering, at any depth), or "*" (everything). Whatever no pattern
// matches is denied; the zero value denies everything.
type AllowedCommands struct {
	all      bool
	exact    map[string]bool
	prefixes []string // each ends in "."
}

var (
	commandRe = regexp.MustCompile(`^[a-z0-9_-]+(\.[a-z0-9_-]+)*$`)
	patternRe = regexp.MustCompile(`^[a-z0-9_-]+(\.[a-z0-9_-]+)*(\.\*)?$`)
)

// ParseAllowedCommands compiles patterns. A malformed pattern ("eng*",
// "a..b", "*.get", upper case, white space) is an error that names it.
func ParseAllowedCommands(patterns []string) (AllowedCommands, error) {
	a := AllowedCommands{exact: map[string]bool{}}
	for _, p := range patterns {
		switch {
		case p == "*":
			a.all = true
		case !patternRe.MatchString(p):
			return AllowedCommands{}, fmt.Errorf("protocol: allowed command pattern %q is malformed (want a.b, a.* or *)", p)
		case strings.HasSuffix(p, ".*"):
			a.prefixes = append(a.prefixes, strings.TrimSuffix(p, "*"))
		default:
			a.exact[p] = true
		}
	}
	return a, nil
}

// ParseAllowedCommandsEnv parses the ALLOWED_COMMANDS variable: a JSON
// array of patterns, or patterns separated by commas. Empty denies all.
func ParseAllowedCommandsEnv(s string) (AllowedCommands, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return ParseAllowedCommands(nil)
	}
	var patterns []string
	if strings.HasPrefix(s, "[") {
		if err := json.Unmarshal([]byte(s), &patterns); err != nil {
			return AllowedCommands{}, fmt.Errorf("protocol: ALLOWED_COMMANDS is not a JSON array of strings: %w", err)
		}
	} else {
		for _, p := range strings.Split(s, ",") {
			patterns = append(patterns, strings.TrimSpace(p))
		}
	}
	return ParseAllowedCommands(patterns)
}

// Allows reports whether command may run. A malformed command name is
// never allowed, not even by "*".
func (a AllowedCommands) Allows(command string) bool {
	if !commandRe.MatchString(command) {
		return false
	}
	if a.all || a.exact[command] {
		return true
	}
	for _, p := range a.prefixes {
		if strings.HasPrefix(command, p) {
			return true
		}
	}
	return false
}

// ProgressCommand is the command name a progress call is checked against.
const ProgressCommand = "worker.progress"
