package protocol

import "time"

// MaxProgressOutputBytes bounds the output text of one progress event.
const MaxProgressOutputBytes = 64 << 10

// MaxRefusedCommandBytes bounds the command a refusal echoes (longer ones
// are cut).
const MaxRefusedCommandBytes = 4096

// Refusal says which call of the agent was refused and why.
type Refusal struct {
	// Tool is the agent's tool (Bash for Claude, Execute for Droid), or
	// one of the RefusedTool* kinds below for what the runtime refused
	// around the agent's tools.
	Tool string `json:"tool"`
	// Code is a stable code for what the runtime refused (the Refused*
	// codes); "" for a tool call ALLOWED_COMMANDS refused.
	Code string `json:"code,omitempty"`
	// Command is the shell command or the progress step, cut to
	// MaxRefusedCommandBytes and with secrets redacted.
	Command string `json:"command,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// Host and Port name a connection a sealed worker's egress allowlist
	// refused (Tool "network").
	Host string `json:"host,omitempty"`
	Port int    `json:"port,omitempty"`
}

// The refusals the runtime makes around the agent's tools (Refusal.Tool).
const (
	// RefusedToolProgress: a call of the progress endpoint.
	RefusedToolProgress = "progress"
	// RefusedToolNetwork: a connection of a sealed worker that its
	// gateway's egress.sock refused (off the allowlist, or a name
	// resolved to a local address).
	RefusedToolNetwork = "network"
	// RefusedToolModel: a model API call refused, by the gateway's
	// model.sock (not the worker's token) or the wrapper's model proxy
	// (outside a task, past a budget, not the model API's method or path).
	RefusedToolModel = "model"
	// RefusedToolConnections: a connection to one of a sealed worker's
	// sockets over the worker's connection budget (GATEWAY_MAX_CONNS).
	RefusedToolConnections = "connections"
	// RefusedToolDisk: writes past the worker's disk limit.
	RefusedToolDisk = "disk"
)

// Stable codes of what the runtime refused (Refusal.Code), also the
// "code" of the refusing answer where it has a body.
const (
	RefusedEgress          = "EGRESS_REFUSED"
	RefusedModelToken      = "MODEL_TOKEN_REFUSED"
	RefusedConnectionCap   = "CONNECTION_LIMIT"
	RefusedModelPath       = "MODEL_PATH_REFUSED"
	RefusedModelNoTask     = "MODEL_CALL_OUTSIDE_TASK"
	RefusedModelOverBudget = "BUDGET_EXCEEDED"
	// RefusedGitPush: a push the gateway refused (not the task's branch,
	// a tag, a delete, a force push); the reason says which.
	RefusedGitPush = "GIT_PUSH_REFUSED"
	// RefusedDiskFull: the worker's disk (its workspace, home and
	// temporary directories, bounded by limits.disk) is full; the agent's
	// writes fail with ENOSPC.
	RefusedDiskFull = "DISK_FULL"
)

// Progress levels. Warnings carry what the agent did not ask to report,
// such as the model API being retried.
const (
	LevelInfo    = "info"
	LevelWarning = "warning"
)

// Progress is an intermediate report of a running task ("I keep going"):
// the worker stays busy and the consumer need not answer.
type Progress struct {
	V         int    `json:"v"`
	Type      Type   `json:"type"`
	WorkerID  string `json:"worker_id"`
	RequestID string `json:"request_id"`
	TaskID    string `json:"task_id,omitempty"`
	Step      string `json:"step"`
	// ProgressPct is 0 to 100; nil when the agent did not say.
	ProgressPct *int   `json:"progress_pct,omitempty"`
	Output      string `json:"output,omitempty"`
	Level       string `json:"level,omitempty"` // info (default) or warning
	// Refused is set on the warning the wrapper publishes when a call of
	// the agent was refused (a shell command outside ALLOWED_COMMANDS, a
	// progress call the endpoint turned down): nothing the agent tries is
	// refused without the consumer seeing it.
	Refused *Refusal `json:"refused,omitempty"`
	// StepsCompleted is the run's count of progress steps so far,
	// this one included.
	StepsCompleted int `json:"steps_completed,omitempty"`
	// StepsTotal is the run's count of steps in all, when the agent said
	// (a progress report's steps_total).
	StepsTotal int       `json:"steps_total,omitempty"`
	Timestamp  time.Time `json:"timestamp"`
}

// Validate checks every field of p.
func (p Progress) Validate() error {
	if err := checkID("worker_id", p.WorkerID, true); err != nil {
		return err
	}
	if err := checkID("request_id", p.RequestID, true); err != nil {
		return err
	}
	if err := checkID("task_id", p.TaskID, false); err != nil {
		return err
	}
	return p.validateReport()
}

// validateReport checks the part of a progress event that the agent
// supplies (step, percentage, output), shared with the progress request
// the wrapper's endpoint takes.
func (p Progress) validateReport() error {
	if p.Step == "" {
		return fieldErr("step", "required")
	}
	if len(p.Step) > 1024 {
		return fieldErr("step", "is %d bytes, at most 1024", len(p.Step))
	}
	if p.ProgressPct != nil && (*p.ProgressPct < 0 || *p.ProgressPct > 100) {
		return fieldErr("progress_pct", "is %d, want 0 to 100", *p.ProgressPct)
	}
	if len(p.Output) > MaxProgressOutputBytes {
		return fieldErr("output", "is %d bytes, at most %d", len(p.Output), MaxProgressOutputBytes)
	}
	if p.Level != "" && p.Level != LevelInfo && p.Level != LevelWarning {
		return fieldErr("level", "is %q, want info or warning", p.Level)
	}
	if r := p.Refused; r != nil {
		if p.Level != LevelWarning {
			return fieldErr("level", "is %q, want warning with refused", p.Level)
		}
		if r.Tool == "" || len(r.Tool) > 200 {
			return fieldErr("refused.tool", "want 1 to 200 bytes")
		}
		if len(r.Command) > MaxRefusedCommandBytes {
			return fieldErr("refused.command", "is %d bytes, at most %d", len(r.Command), MaxRefusedCommandBytes)
		}
		if len(r.Code) > 64 {
			return fieldErr("refused.code", "is %d bytes, at most 64", len(r.Code))
		}
		if len(r.Reason) > 1024 {
			return fieldErr("refused.reason", "is %d bytes, at most 1024", len(r.Reason))
		}
		if len(r.Host) > 253 {
			return fieldErr("refused.host", "is %d bytes, at most 253", len(r.Host))
		}
		if r.Port < 0 || r.Port > 65535 {
			return fieldErr("refused.port", "is %d, want 1 to 65535", r.Port)
		}
	}
	if p.StepsCompleted < 0 {
		return fieldErr("steps_completed", "negative")
	}
	if p.StepsTotal < 0 || p.StepsTotal > MaxStepsTotal {
		return fieldErr("steps_total", "is %d, want 0 to %d", p.StepsTotal, MaxStepsTotal)
	}
	if p.Timestamp.IsZero() {
		return fieldErr("timestamp", "required")
	}
	return nil
}

// Encode returns the JSON document of p, with v and type set.
func (p Progress) Encode() ([]byte, error) {
	p.V, p.Type = Version, TypeProgress
	return encode(p)
}

// DecodeProgress parses and validates a progress document.
func DecodeProgress(data []byte) (Progress, error) {
	var p Progress
	err := decode(TypeProgress, data, &p, func() error { return p.Validate() })
	return p, err
}

// ProgressReport is what an agent sends to the wrapper's progress endpoint
// (POST /progress) or passes to `worker-wrapper progress`. The wrapper adds
// the worker, the run and the time.
type ProgressReport struct {
	Step        string `json:"step"`
	ProgressPct *int   `json:"progress_pct,omitempty"`
	Output      string `json:"output,omitempty"`
	// StepsTotal is how many steps the run has in all, when the agent
	// knows (0: unknown, or unchanged since it last said).
	StepsTotal int `json:"steps_total,omitempty"`
}

// MaxStepsTotal bounds a run's announced count of steps.
const MaxStepsTotal = 100_000

// DecodeProgressReport parses a progress report strictly (no v or type:
// it does not cross Redis).
func DecodeProgressReport(data []byte) (ProgressReport, error) {
	var r ProgressReport
	if err := decodeBare("progress report", data, &r); err != nil {
		return r, err
	}
	p := Progress{Step: r.Step, ProgressPct: r.ProgressPct, Output: r.Output, StepsTotal: r.StepsTotal, Timestamp: time.Unix(1, 0)}
	if err := p.validateReport(); err != nil {
		return r, wrapField("progress report", err)
	}
	return r, nil
}

// EnvDiskLimit is the variable that tells the wrapper its disk limit in
// bytes (limits.disk, or the manager's default): the size of the
// filesystem of its workspace and home, whose filling it reports.
const EnvDiskLimit = "WORKER_DISK_LIMIT"
