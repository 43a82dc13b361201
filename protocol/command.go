package protocol

import (
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Action names a command to the worker-manager.
type Action string

const (
	ActionCreate       Action = "create"
	ActionDelete       Action = "delete"
	ActionStatus       Action = "status"
	ActionPause        Action = "pause"
	ActionUnpause      Action = "unpause"
	ActionList         Action = "list"
	ActionResetContext Action = "reset_context" // forget a project's session and stored context
	ActionSetBudget    Action = "set_budget"    // set (or, with limit 0, remove) a project's budget
	ActionSetNetwork   Action = "set_network"   // change a running sealed worker's egress allowlist
	ActionHibernate    Action = "hibernate"     // remove an idle long-lived worker's container, keep the worker (a task wakes it)
)

// Limits are a worker container's resource limits; zero values take the
// manager's defaults (WORKER_MEMORY_LIMIT, WORKER_CPU_LIMIT,
// WORKER_PIDS_LIMIT, WORKER_DISK_LIMIT).
type Limits struct {
	Memory string  `json:"memory,omitempty"` // Docker notation: "512m", "1g"
	CPUs   float64 `json:"cpus,omitempty"`   // 0.5 = half a core
	Pids   int64   `json:"pids,omitempty"`
	// Disk bounds what the worker may write (its workspace, home and
	// temporary directories together), in the same notation ("10g"); a
	// write past it fails with ENOSPC.
	Disk string `json:"disk,omitempty"`
}

// MinDiskBytes is the smallest disk limit a worker may have: the
// filesystem a limit is made of needs some of it for itself.
const MinDiskBytes = 16 << 20

var memoryRe = regexp.MustCompile(`^[0-9]+[bkmgBKMG]?$`)

// MinMemoryBytes is the smallest memory limit a worker may have (Docker's
// own minimum).
const MinMemoryBytes = 6 << 20

// MemoryBytes returns the bytes of a size such as 512m (b, k, m, g:
// powers of 1024), or -1 when it is not one.
func MemoryBytes(size string) int64 {
	if !memoryRe.MatchString(size) {
		return -1
	}
	unit := int64(1)
	switch size[len(size)-1] {
	case 'k', 'K':
		unit = 1 << 10
	case 'm', 'M':
		unit = 1 << 20
	case 'g', 'G':
		unit = 1 << 30
	}
	digits := strings.TrimRight(size, "bkmgBKMG")
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || n > (1<<62)/unit {
		return -1
	}
	return n * unit
}

// WorkerSpec describes the worker a create command asks for.
type WorkerSpec struct {
	AgentType AgentType `json:"agent_type"`
	Kind      Kind      `json:"kind,omitempty"` // default long_lived
	// Instructions become CLAUDE.md (claude) or AGENTS.md (droid) in the
	// worker's workspace.
	Instructions    string       `json:"instructions,omitempty"`
	AllowedCommands []string     `json:"allowed_commands,omitempty"`
	Capabilities    []Capability `json:"capabilities,omitempty"`
	ProjectID       string       `json:"project_id,omitempty"`
	UserID          string       `json:"user_id,omitempty"`
	// Model is the model the agent uses (Claude --model, Droid's custom
	// model id); empty: the agent's default.
	Model string `json:"model,omitempty"`
	// Env holds extra variables for the agent; the runtime's own
	// (ReservedEnv) are refused.
	Env    map[string]string `json:"env,omitempty"`
	Limits Limits            `json:"limits,omitempty"`
	// MCPServers are the MCP servers the agent gets (mcp.go). They are
	// the worker's configuration, not its image's: no image hash covers
	// them.
	MCPServers []MCPServer `json:"mcp_servers,omitempty"`
	// Placement constrains the hosts of a fleet the worker may run on
	// (fleet.go); none: any host with room.
	Placement *Placement `json:"placement,omitempty"`
	// Network is a sealed worker's egress allowlist (egress.go).
	Network *Network `json:"network,omitempty"`
	// Git is the repository of the worker's tasks that name none
	// (git.go); its branch, when set, is every such task's.
	Git *Git `json:"git,omitempty"`
	// Image is the project's own image the worker is built on (image.go);
	// none: the runtime's worker-base.
	Image *ProjectImage `json:"image,omitempty"`
	// Runtime is the sandbox the worker's container runs in (runc, or
	// gvisor for sealed workers); empty: the manager's WORKER_RUNTIME.
	Runtime Runtime `json:"runtime,omitempty"`
}

var envNameRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Validate checks every field of s; its errors name the field.
func (s WorkerSpec) Validate() error { return wrapField("spec", s.validate("spec")) }

func (s *WorkerSpec) validate(path string) error {
	if !s.AgentType.Valid() {
		return fieldErr(path+".agent_type", "is %q, want claude, droid, codex, opencode, qwen or acp", s.AgentType)
	}
	if s.Kind != "" && !s.Kind.Valid() {
		return fieldErr(path+".kind", "is %q, want long_lived or developer", s.Kind)
	}
	if len(s.Instructions) > MaxInstructionsBytes {
		return fieldErr(path+".instructions", "is %d bytes, at most %d", len(s.Instructions), MaxInstructionsBytes)
	}
	if _, err := ParseAllowedCommands(s.AllowedCommands); err != nil {
		return fieldErr(path+".allowed_commands", "%v", err)
	}
	for i, c := range s.Capabilities {
		if !c.Valid() {
			return fieldErr(path+".capabilities", "item %d: unknown capability %q", i, c)
		}
	}
	if err := checkID(path+".project_id", s.ProjectID, false); err != nil {
		return err
	}
	if err := checkID(path+".user_id", s.UserID, false); err != nil {
		return err
	}
	if err := checkID(path+".model", s.Model, false); err != nil {
		return err
	}
	for k := range s.Env {
		if !envNameRe.MatchString(k) {
			return fieldErr(path+".env", "%q is not a valid environment variable name", k)
		}
		if ReservedEnv(k) {
			return fieldErr(path+".env", "%s is set by the runtime, not by a spec", k)
		}
	}
	if s.Limits.Memory != "" && !memoryRe.MatchString(s.Limits.Memory) {
		return fieldErr(path+".limits.memory", "is %q, want a size such as 512m", s.Limits.Memory)
	}
	if s.Limits.Memory != "" && MemoryBytes(s.Limits.Memory) < MinMemoryBytes {
		return fieldErr(path+".limits.memory", "is %q, want at least 6m (Docker's minimum; 0 would remove the limit)", s.Limits.Memory)
	}
	if s.Limits.Disk != "" && !memoryRe.MatchString(s.Limits.Disk) {
		return fieldErr(path+".limits.disk", "is %q, want a size such as 10g", s.Limits.Disk)
	}
	if s.Limits.Disk != "" && MemoryBytes(s.Limits.Disk) < MinDiskBytes {
		return fieldErr(path+".limits.disk", "is %q, want at least 16m (0 would remove the limit)", s.Limits.Disk)
	}
	if s.Limits.CPUs < 0 {
		return fieldErr(path+".limits.cpus", "negative")
	}
	if s.Limits.Pids < 0 {
		return fieldErr(path+".limits.pids", "negative")
	}
	if err := s.Placement.validate(path + ".placement"); err != nil {
		return err
	}
	if s.Network != nil {
		if _, err := ParseEgressRules(s.Network.Allow); err != nil {
			return fieldErr(path+".network.allow", "%v", err)
		}
	}
	if err := s.Git.validate(path + ".git"); err != nil {
		return err
	}
	if err := s.Image.validate(path + ".image"); err != nil {
		return err
	}
	if s.Runtime != "" && !s.Runtime.Valid() {
		return fieldErr(path+".runtime", "is %q, want runc or gvisor", s.Runtime)
	}
	return validateMCPServers(path+".mcp_servers", s.MCPServers)
}

// Command is one entry of the command stream.
type Command struct {
	V    int    `json:"v"`
	Type Type   `json:"type"`
	ID   string `json:"command_id"` // required; echoed on the reply
	// Action is what to do; WorkerID names the worker for delete, status,
	// pause and unpause; Spec describes the worker for create; ProjectID
	// and AgentType name the session for reset_context.
	Action    Action      `json:"action"`
	WorkerID  string      `json:"worker_id,omitempty"`
	Spec      *WorkerSpec `json:"spec,omitempty"`
	ProjectID string      `json:"project_id,omitempty"`
	AgentType AgentType   `json:"agent_type,omitempty"`
	// Budget is set_budget's budget for ProjectID.
	Budget *Budget `json:"budget,omitempty"`
	// Network is set_network's allowlist for WorkerID (it replaces the
	// worker's; new connections follow it).
	Network *Network `json:"network,omitempty"`
	// ReplyTo is the stream the reply goes to; no reply when empty.
	ReplyTo   string    `json:"reply_to,omitempty"`
	Timestamp time.Time `json:"timestamp,omitempty"`
	// Deadline is when the sender stops waiting for the reply. A manager
	// that reads the command at or after it does not carry it out
	// (COMMAND_EXPIRED), and one still carrying it out then gives up, so
	// that nothing happens that nobody waits for. Zero: no deadline (the
	// manager's own timeout alone bounds the command).
	Deadline time.Time `json:"deadline,omitzero"`
}

// Expired reports whether c has a deadline and now is at or after it.
func (c Command) Expired(now time.Time) bool {
	return !c.Deadline.IsZero() && !now.Before(c.Deadline)
}

// Validate checks every field of c, and that the action has what it needs.
func (c Command) Validate() error {
	if err := checkID("command_id", c.ID, true); err != nil {
		return err
	}
	if err := checkID("reply_to", c.ReplyTo, false); err != nil {
		return err
	}
	if err := checkID("worker_id", c.WorkerID, false); err != nil {
		return err
	}
	if err := checkID("project_id", c.ProjectID, false); err != nil {
		return err
	}
	if c.AgentType != "" && !c.AgentType.Valid() {
		return fieldErr("agent_type", "is %q, want claude, droid, codex, opencode, qwen or acp", c.AgentType)
	}
	if c.Budget != nil && c.Action != ActionSetBudget {
		return fieldErr("budget", "only for set_budget")
	}
	if c.Network != nil && c.Action != ActionSetNetwork {
		return fieldErr("network", "only for set_network")
	}
	switch c.Action {
	case ActionCreate:
		if c.Spec == nil {
			return fieldErr("spec", "required for create")
		}
		return c.Spec.validate("spec")
	case ActionDelete, ActionStatus, ActionPause, ActionUnpause, ActionHibernate:
		if c.WorkerID == "" {
			return fieldErr("worker_id", "required for %s", c.Action)
		}
	case ActionList:
	case ActionSetNetwork:
		if c.WorkerID == "" {
			return fieldErr("worker_id", "required for set_network")
		}
		if c.Network == nil {
			return fieldErr("network", "required for set_network")
		}
		if _, err := ParseEgressRules(c.Network.Allow); err != nil {
			return fieldErr("network.allow", "%v", err)
		}
	case ActionSetBudget:
		if c.ProjectID == "" {
			return fieldErr("project_id", "required for set_budget")
		}
		if c.Budget == nil {
			return fieldErr("budget", "required for set_budget")
		}
		return c.Budget.validate("budget")
	case ActionResetContext:
		if c.ProjectID == "" {
			return fieldErr("project_id", "required for reset_context")
		}
		if c.AgentType == "" {
			return fieldErr("agent_type", "required for reset_context")
		}
	default:
		return fieldErr("action", "unknown action %q", c.Action)
	}
	if c.Spec != nil {
		return fieldErr("spec", "only for create")
	}
	return nil
}

// Encode returns the JSON document of c, with v and type set.
func (c Command) Encode() ([]byte, error) {
	c.V, c.Type = Version, TypeCommand
	return encode(c)
}

// DecodeCommand parses and validates a command document.
// The agent type may be spelled as the design documents do (CLAUDE,
// FACTORY) or as ParseAgentType accepts; it is normalised.
func DecodeCommand(data []byte) (Command, error) {
	var c Command
	err := decode(TypeCommand, data, &c, func() error {
		c.AgentType = normalAgent(c.AgentType)
		if c.Spec != nil {
			c.Spec.AgentType = normalAgent(c.Spec.AgentType)
		}
		return c.Validate()
	})
	return c, err
}

// normalAgent returns the canonical spelling of a, or a unchanged when it
// names no agent (validation then says so).
func normalAgent(a AgentType) AgentType {
	if a == "" {
		return a
	}
	if n, err := ParseAgentType(string(a)); err == nil {
		return n
	}
	return a
}

// ContainerStatus is a worker's status as the spawner reports it.
type ContainerStatus string

const (
	ContainerQueued   ContainerStatus = "queued" // a create waits for a slot
	ContainerStarting ContainerStatus = "starting"
	ContainerRunning  ContainerStatus = "running"
	ContainerPaused   ContainerStatus = "paused"
	ContainerStopped  ContainerStatus = "stopped"
	ContainerFailed   ContainerStatus = "failed"
	// ContainerHibernated: the worker has no container until a task on
	// its input wakes it.
	ContainerHibernated ContainerStatus = "hibernated"
)

// WorkerInfo describes one worker in a reply.
type WorkerInfo struct {
	WorkerID    string          `json:"worker_id"`
	Status      ContainerStatus `json:"status"`
	State       WorkerState     `json:"state,omitempty"` // the wrapper's state
	Health      Health          `json:"health,omitempty"`
	AgentType   AgentType       `json:"agent_type,omitempty"`
	Kind        Kind            `json:"kind,omitempty"`
	ProjectID   string          `json:"project_id,omitempty"`
	ContainerID string          `json:"container_id,omitempty"`
	Image       string          `json:"image,omitempty"`
	IP          string          `json:"ip,omitempty"`
	RequestID   string          `json:"request_id,omitempty"`
	TaskID      string          `json:"task_id,omitempty"`
	ExitCode    *int            `json:"exit_code,omitempty"`
	Error       string          `json:"error,omitempty"`
	StartedAt   time.Time       `json:"started_at,omitzero"`
	UpdatedAt   time.Time       `json:"updated_at,omitzero"`
	Host        string          `json:"host,omitempty"`    // the host whose engine runs it
	Network     *Network        `json:"network,omitempty"` // a sealed worker's egress allowlist in force
	// Incarnation counts the worker's containers: 1 for the first, one
	// more for each made under the same id (after a death, a lost host,
	// a hibernation).
	Incarnation int `json:"incarnation,omitempty"`
}

// Reply answers one command on the stream the command named.
type Reply struct {
	V         int          `json:"v"`
	Type      Type         `json:"type"`
	CommandID string       `json:"command_id"`
	Action    Action       `json:"action"`
	OK        bool         `json:"ok"`
	WorkerID  string       `json:"worker_id,omitempty"`
	Worker    *WorkerInfo  `json:"worker,omitempty"`
	Workers   []WorkerInfo `json:"workers,omitempty"`
	Error     *Error       `json:"error,omitempty"`
	// Warnings say what the command did that its sender may not expect
	// (a create's capability that gives less than its name suggests).
	Warnings  []string  `json:"warnings,omitempty"`
	Timestamp time.Time `json:"timestamp"`
}

// Validate checks r: an ok reply has no error, a failed one has one.
func (r Reply) Validate() error {
	if r.CommandID == "" {
		return fieldErr("command_id", "required")
	}
	if r.OK && r.Error != nil {
		return fieldErr("error", "must be absent when ok is true")
	}
	if !r.OK && r.Error == nil {
		return fieldErr("error", "required when ok is false")
	}
	if r.Timestamp.IsZero() {
		return fieldErr("timestamp", "required")
	}
	return r.Error.validate("error")
}

// Encode returns the JSON document of r, with v and type set.
func (r Reply) Encode() ([]byte, error) {
	r.V, r.Type = Version, TypeReply
	if r.Action == ActionList && r.OK {
		// A list always carries "workers", [] when there are none.
		type reply Reply
		workers := r.Workers
		if workers == nil {
			workers = []WorkerInfo{}
		}
		return encode(struct {
			reply
			Workers []WorkerInfo `json:"workers"`
		}{reply(r), workers})
	}
	return encode(r)
}

// DecodeReply parses and validates a reply document.
func DecodeReply(data []byte) (Reply, error) {
	var r Reply
	err := decode(TypeReply, data, &r, func() error { return r.Validate() })
	return r, err
}

// ControlPause is the one control action a wrapper sends today.
const ControlPause = "pause"

// Control is a wrapper's request to the spawner, on the control stream.
// The wrapper never pauses itself: it asks, and the spawner pauses it.
type Control struct {
	V         int       `json:"v"`
	Type      Type      `json:"type"`
	Action    string    `json:"action"` // pause
	WorkerID  string    `json:"worker_id"`
	Reason    string    `json:"reason,omitempty"` // e.g. "stop_output:complete"
	RequestID string    `json:"request_id,omitempty"`
	Timestamp time.Time `json:"timestamp"`
}

// Validate checks every field of c.
func (c Control) Validate() error {
	if c.Action != ControlPause {
		return fieldErr("action", "is %q, want pause", c.Action)
	}
	if err := checkID("worker_id", c.WorkerID, true); err != nil {
		return err
	}
	if err := checkID("request_id", c.RequestID, false); err != nil {
		return err
	}
	if c.Timestamp.IsZero() {
		return fieldErr("timestamp", "required")
	}
	return nil
}

// Encode returns the JSON document of c, with v and type set.
func (c Control) Encode() ([]byte, error) {
	c.V, c.Type = Version, TypeControl
	return encode(c)
}

// DecodeControl parses and validates a control document.
func DecodeControl(data []byte) (Control, error) {
	var c Control
	err := decode(TypeControl, data, &c, func() error { return c.Validate() })
	return c, err
}
