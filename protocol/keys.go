package protocol

import (
	"fmt"
	"strings"
)

// DefaultPrefix is the first segment of every stream and key name. The seeds
// all use "worker"; a deployment that shares one Redis between environments
// sets another prefix (WORKER_KEY_PREFIX) on every component.
const DefaultPrefix = "worker"

// DeveloperGroup is the consumer group through which developer workers share
// the developer input stream.
const DeveloperGroup = "developers"

// WorkerGroup is the consumer group through which a long-lived worker
// reads its own input stream; the group gives it pending entries and XACK,
// so that a task survives a wrapper restart.
const WorkerGroup = "wrapper"

// GroupFor returns the consumer group a worker of kind reads its input
// through. The consumer name is always the worker id.
func GroupFor(kind Kind) string {
	if kind == KindDeveloper {
		return DeveloperGroup
	}
	return WorkerGroup
}

// ManagerGroup is the consumer group through which worker-managers share the
// command stream, so that each command is executed once.
const ManagerGroup = "managers"

// Keys builds every Redis stream and key name. The zero value uses
// DefaultPrefix. No other package spells a key by hand.
type Keys struct {
	// Prefix replaces DefaultPrefix when not empty. It must not contain
	// whitespace; colons are allowed ("staging:worker").
	Prefix string
}

// NewKeys returns Keys for prefix, or an error naming what is wrong with it.
// An empty prefix means DefaultPrefix.
func NewKeys(prefix string) (Keys, error) {
	if prefix == "" {
		return Keys{Prefix: DefaultPrefix}, nil
	}
	if strings.ContainsAny(prefix, " \t\r\n{}") || strings.HasSuffix(prefix, ":") || strings.HasPrefix(prefix, ":") {
		return Keys{}, fmt.Errorf("protocol: key prefix %q: must not contain whitespace or braces, nor start or end with ':'", prefix)
	}
	return Keys{Prefix: prefix}, nil
}

func (k Keys) p() string {
	if k.Prefix == "" {
		return DefaultPrefix
	}
	return k.Prefix
}

func (k Keys) join(parts ...string) string {
	return k.p() + ":" + strings.Join(parts, ":")
}

// Commands is the stream of control commands to the worker-managers
// (create, delete, status, pause, unpause, list, reset_context).
func (k Keys) Commands() string { return k.join("commands") }

// Lifecycle is the stream of lifecycle events of every worker.
func (k Keys) Lifecycle() string { return k.join("lifecycle") }

// Control is the stream of a wrapper's requests to the spawner (pause).
func (k Keys) Control() string { return k.join("control") }

// Status is the hash that holds the current status of one worker.
func (k Keys) Status(workerID string) string { return k.join("status", workerID) }

// StatusHistory is the list of a worker's last state and health
// transitions (TransitionRecord documents, newest first, at most
// MaxStatusHistory).
func (k Keys) StatusHistory(workerID string) string { return k.join("status", workerID, "history") }

// Heartbeat is the key, with a TTL, that a live worker refreshes.
func (k Keys) Heartbeat(workerID string) string { return k.join("heartbeat", workerID) }

// Input is the input stream of one long-lived worker.
func (k Keys) Input(workerID string) string { return k.join(workerID, "input") }

// Output is the output stream (progress and output events) of one
// long-lived worker.
func (k Keys) Output(workerID string) string { return k.join(workerID, "output") }

// DeveloperInput is the task stream shared by every developer worker,
// read through the DeveloperGroup consumer group: the queue of the
// normal priority (and of a task that names none).
func (k Keys) DeveloperInput() string { return k.join("developer", "input") }

// DeveloperInputFor is the developer queue of priority p: the normal one
// is DeveloperInput, high and low have a stream each
// ("worker:developer:input:high").
func (k Keys) DeveloperInputFor(p Priority) string {
	if p == PriorityNormal || p == "" {
		return k.DeveloperInput()
	}
	return k.join("developer", "input", string(p))
}

// DeveloperInputs are the developer queues, highest priority first.
func (k Keys) DeveloperInputs() []string {
	out := make([]string, len(Priorities))
	for i, p := range Priorities {
		out[i] = k.DeveloperInputFor(p)
	}
	return out
}

// InputsFor are every stream a worker of kind reads through its group:
// its own input, or the developer queues (highest priority first).
func (k Keys) InputsFor(kind Kind, workerID string) []string {
	if kind == KindDeveloper {
		return k.DeveloperInputs()
	}
	return []string{k.Input(workerID)}
}

// DeveloperIdle is the sorted set of the developer workers that are idle
// and healthy (score: the unix ms of their last heartbeat while so); a
// developer worker hands a task of a project whose session another one
// holds to that one only while it is there (affinity.go).
func (k Keys) DeveloperIdle() string { return k.join("developer", "idle") }

// DeveloperOutput is the output stream shared by every developer worker.
func (k Keys) DeveloperOutput() string { return k.join("developer", "output") }

// InputFor and OutputFor give the streams a worker of the given kind reads
// and writes.
func (k Keys) InputFor(kind Kind, workerID string) string {
	if kind == KindDeveloper {
		return k.DeveloperInput()
	}
	return k.Input(workerID)
}

// OutputFor: see InputFor.
func (k Keys) OutputFor(kind Kind, workerID string) string {
	if kind == KindDeveloper {
		return k.DeveloperOutput()
	}
	return k.Output(workerID)
}

// Run is the hash that holds the status of one run (one task), keyed by its
// request_id. Its sender creates it (requested), the wrapper writes it from
// then on, and the spawner when it answers or hands on a dead worker's task
// (see Run in statemachine.go).
func (k Keys) Run(requestID string) string { return k.join("run", requestID) }

// Workers is the set of the ids of every worker the spawner has created and
// not yet removed.
func (k Keys) Workers() string { return k.join("workers") }

// Session is the hash that records a project's agent session.
func (k Keys) Session(agent AgentType, projectID string) string {
	return k.join("session", string(agent), projectID)
}

// SessionFiles is the session store's copy of a project's current agent
// session files (gzip of a JSON document; see PROTOCOL.md, Session store).
func (k Keys) SessionFiles(agent AgentType, projectID string) string {
	return k.join("session", string(agent), projectID, "files")
}

// ProjectContext is the string key that holds a project's stored context
// (the summary of its retired sessions).
func (k Keys) ProjectContext(projectID string) string { return k.join("project", projectID, "context") }

// UsageProject, UsageSession and UsageWorker are hashes of cumulative token
// and cost counters (see the Usage* field constants).
func (k Keys) UsageProject(projectID string) string { return k.join("usage", "project", projectID) }

// ProjectBudget is the hash of a project's Budget (set_budget).
func (k Keys) ProjectBudget(projectID string) string { return k.join("budget", "project", projectID) }

// UsageSession: see UsageProject.
func (k Keys) UsageSession(sessionID string) string { return k.join("usage", "session", sessionID) }

// UsageWorker: see UsageProject.
func (k Keys) UsageWorker(workerID string) string { return k.join("usage", "worker", workerID) }

// Replies is a conventional reply stream for a client that names itself;
// a command may name any stream in reply_to.
func (k Keys) Replies(client string) string { return k.join("replies", client) }

// Managers is the set of the ids of the worker-managers that have written
// a state hash (ManagerState). A member whose hash has expired is a
// manager gone; readers remove it. A sender of commands reads it to learn
// that no manager is alive before it waits for a reply.
func (k Keys) Managers() string { return k.join("managers") }

// ManagerState is the hash a running worker-manager refreshes about
// itself every third of ManagerStateTTLSeconds; it expires that long
// after the last refresh, and a manager that stops cleanly deletes it.
func (k Keys) ManagerState(managerID string) string { return k.join("manager", managerID) }

// ManagerStateTTLSeconds is how long a manager's state hash outlives its
// last refresh: a manager that dies without stopping counts as alive for
// at most this long.
const ManagerStateTTLSeconds = 30
