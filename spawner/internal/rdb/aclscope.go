package rdb

import (
	"strings"

	"github.com/agentvisor/agentvisor/protocol"
)

// UserScope is what a worker's Redis user is confined to beyond its own
// keys: its kind (which streams it reads), and, for a worker bound to a
// project (protocol.WorkerSpec.BoundProject), that project's keys of its
// agent type alone. A worker bound to no project (a developer worker, a
// long-lived one without a project_id) serves whatever project its tasks
// name, which no rule fixed at create can know: its user keeps every
// project's session, context, usage and budget keys.
type UserScope struct {
	Kind    protocol.Kind
	Agent   protocol.AgentType
	Project string // "": bound to none
}

// ScopeOf is the scope of the user of a worker of spec.
func ScopeOf(spec protocol.WorkerSpec) UserScope {
	return UserScope{Kind: spec.Kind, Agent: spec.AgentType, Project: spec.BoundProject()}
}

// projectKeys are the key patterns of the projects a user of scope s
// reaches, read and write, and the budget keys it may read.
func (s UserScope) projectKeys(k protocol.Keys) (rw []string, budgets string) {
	if s.Project == "" || s.Agent == "" {
		return []string{k.Session("*", "*"), k.ProjectContext("*"), k.UsageProject("*")}, k.ProjectBudget("*")
	}
	// A prefix or a project id may hold glob's characters: each is
	// escaped, so that a pattern matches its one key.
	pre := k.Prefix
	if pre == "" {
		pre = protocol.DefaultPrefix
	}
	ek, p := protocol.Keys{Prefix: escapeGlob(pre)}, escapeGlob(s.Project)
	return []string{ek.Session(s.Agent, p), ek.SessionFiles(s.Agent, p), ek.ProjectContext(p), ek.UsageProject(p)}, ek.ProjectBudget(p)
}

// escapeGlob escapes the characters of Redis's glob patterns in s.
func escapeGlob(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// record is how a user's scope is kept in the worker users' hash, after
// its kind and its password's hash: "<kind> <hash> <agent> <project>"
// for a bound worker (ids hold no white space), "<kind> <hash>" else.
func (s UserScope) record(hash string) string {
	v := string(s.Kind) + " " + hash
	if s.Project != "" {
		v += " " + string(s.Agent) + " " + s.Project
	}
	return v
}

// parseRecord reads a record back: its scope and the password's hash.
func parseRecord(v string) (UserScope, string, bool) {
	f := strings.Fields(v)
	switch len(f) {
	case 2:
		return UserScope{Kind: protocol.Kind(f[0])}, f[1], true
	case 4:
		return UserScope{Kind: protocol.Kind(f[0]), Agent: protocol.AgentType(f[2]), Project: f[3]}, f[1], true
	}
	return UserScope{}, "", false
}
