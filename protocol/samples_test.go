package protocol

import (
	"encoding/json"
	"time"
)

var sampleTime = time.Date(2026, 11, 21, 9, 30, 0, 123456789, time.UTC)

func pct(n int) *int { return &n }

type encoder interface{ Encode() ([]byte, error) }

// samples are valid documents of every schema, as the Go encoders write
// them: the schema tests check each against its JSON Schema, and the round
// trip test decodes each back.
func samples() map[string][]encoder {
	exit := 137
	return map[string][]encoder{
		"task.schema.json": {
			NewTask("req-1", "Fix the failing test in pkg/foo"),
			Task{RequestID: "req-2", TaskID: "task-9", ProjectID: "proj-a", Prompt: "go on",
				ForceNewSession: true, TimeoutSeconds: 900, Metadata: map[string]any{"chat_id": 42.0}},
			Task{RequestID: "req-3", Prompt: "Use Postgres.", Answers: "req-2", MaxBudgetUSD: 0.5},
			Task{RequestID: "req-4", TaskID: "issue-17", Prompt: "Fix the flaky test", Git: &Git{Remote: "https://git.example.com/shop/api.git",
				Base: "main", Branch: "fix/flaky-test", AuthorName: "Shop Bot", AuthorEmail: "bot@example.com", Message: "Fix the flaky test"}},
		},
		"cancel.schema.json": {
			NewCancel("req-1", ""),
			Cancel{RequestID: "req-2", Reason: "the user changed their mind", Timestamp: &sampleTime},
		},
		"permission_request.schema.json": {
			PermissionRequest{WorkerID: "w-1", RequestID: "req-1", PermissionID: "perm-1", Tool: "Bash",
				Input: json.RawMessage(`{"command":"rm -rf build","description":"clean"}`), TimeoutMS: 300000, Timestamp: sampleTime},
		},
		"permission_reply.schema.json": {
			NewPermissionReply("req-1", "perm-1", true, ""),
			NewPermissionReply("req-1", "perm-2", false, "not on production"),
		},
		"adopt.schema.json": {
			Adopt{WorkerID: "w-2", RedisUser: "agentvisor:worker:w-2"},
			Adopt{WorkerID: "w-3", RedisUser: "agentvisor:worker:w-3", CredentialHosts: []string{"git.example.com", "10.0.0.7", "[fd00::7]"}},
		},
		"message.schema.json": {
			NewMessage("req-1", "Use the staging database, not production."),
		},
		"output.schema.json": {
			Output{RequestID: "req-1", TaskID: "task-9", ProjectID: "proj-a", WorkerID: "w-1", AgentType: AgentClaude,
				Status: StatusComplete, Response: "Done.", Result: json.RawMessage(`{"pr":42}`), SessionID: "5b71",
				Session: &SessionDecision{Action: SessionResume, Reason: SessionReasonContinued, PreviousSessionID: "5b71"},
				Usage:   Usage{Input: 4000, Output: 160, CacheRead: 18000, CacheCreation: 200}, ContextTokens: 11100,
				CostUSD: 0.03425, DurationMS: 372, Timestamp: sampleTime},
			Output{RequestID: "req-2", WorkerID: "w-1", Status: StatusBlocked, Question: "Which branch?", Timestamp: sampleTime,
				Session: &SessionDecision{Action: SessionNew, Reason: SessionReasonResumeFailed,
					ResumeError: NewError(CodeResumeFailed, "No conversation found with session ID: x")}},
			Output{RequestID: "req-3", WorkerID: "w-2", Status: StatusFailed, Attempt: 2, Timestamp: sampleTime,
				Error: NewError(CodeOOMKilled, "container killed by the OOM killer (limit 64m)")},
			Output{RequestID: "req-4", WorkerID: "w-2", Status: StatusCancelled, Timestamp: sampleTime,
				Error: NewError(CodeCancelled, "cancelled while running: the user changed their mind")},
			Output{RequestID: "req-5", WorkerID: "w-3", AgentType: AgentDroid, Status: StatusFailed, Timestamp: sampleTime,
				Usage: Usage{Input: 40000, Output: 2000}, CostUSD: 0.15, CostEstimated: true,
				Error: NewError(CodeBudgetExceeded, "the task's estimated cost $0.1500 passed its max_budget_usd 0.1")},
			Output{RequestID: "req-6", WorkerID: "w-1", Status: StatusComplete, Timestamp: sampleTime, Git: &GitOutput{
				Remote: "https://git.example.com/shop/api.git", Branch: "agentvisor/issue-17", Base: "main",
				BaseCommit: "1111111111111111111111111111111111111111", StartCommit: "1111111111111111111111111111111111111111",
				HeadCommit: "2222222222222222222222222222222222222222", Changed: true, Pushed: true, Uncommitted: true,
				Commits:    []GitCommit{{SHA: "2222222222222222222222222222222222222222", Subject: "Fix the flaky test", Author: "agentvisor <agentvisor@localhost>"}},
				Files:      []GitFileStat{{Path: "pkg/foo/foo_test.go", Insertions: 3, Deletions: 1}, {Path: "logo.png", Binary: true}},
				Insertions: 3, Deletions: 1, Patch: "diff --git a/pkg/foo/foo_test.go b/pkg/foo/foo_test.go\n", PatchBytes: 60,
				BaseHead: "3333333333333333333333333333333333333333", MergesCleanly: new(bool), Conflicts: []string{"pkg/foo/foo_test.go"}}},
			Output{RequestID: "req-7", WorkerID: "w-1", Status: StatusComplete, Timestamp: sampleTime, Git: &GitOutput{
				Remote: "https://git.example.com/shop/api.git", Branch: "agentvisor/req-7", Base: "main",
				BaseCommit: "1111111111111111111111111111111111111111", StartCommit: "1111111111111111111111111111111111111111",
				HeadCommit: "1111111111111111111111111111111111111111"}},
		},
		"progress.schema.json": {
			Progress{WorkerID: "w-1", RequestID: "req-1", TaskID: "task-9", Step: "Running tests", ProgressPct: pct(50),
				Output: "12 passed", StepsCompleted: 3, Timestamp: sampleTime},
			Progress{WorkerID: "w-1", RequestID: "req-1", Step: "API retry 1/10 (HTTP 529)", Level: LevelWarning, Timestamp: sampleTime},
		},
		"lifecycle.schema.json": {
			Lifecycle{WorkerID: "w-1", Event: EventStarted, Source: SourceWrapper, Timestamp: sampleTime},
			Lifecycle{WorkerID: "w-1", Event: EventDied, Source: SourceSpawner, Timestamp: sampleTime, RequestID: "req-1",
				Detail: map[string]any{"exit_code": 137.0, "oom": true}},
		},
		"heartbeat.schema.json": {
			Heartbeat{WorkerID: "w-1", Status: HeartbeatBusy, RequestID: "req-1", TaskID: "task-9", RSSBytes: 9 << 20,
				CPUPercent: 0.4, TasksCompleted: 7, IntervalMS: 10000, Timestamp: sampleTime},
		},
		"command.schema.json": {
			Command{ID: "cmd-1", Action: ActionCreate, ReplyTo: "worker:replies:bot", Timestamp: sampleTime, Spec: &WorkerSpec{
				AgentType: AgentClaude, Kind: KindLongLived, Instructions: "You are the PO.",
				AllowedCommands: []string{"project.get", "engineering.*"}, Capabilities: []Capability{CapGit},
				ProjectID: "proj-a", UserID: "tg-1", Env: map[string]string{"LOG_LEVEL": "debug"},
				Limits: Limits{Memory: "512m", CPUs: 0.5, Pids: 256},
				MCPServers: []MCPServer{
					{Name: "tickets", Command: "tickets-mcp", Args: []string{"--read-only"}, Env: map[string]string{"TICKETS_URL": "http://t"}},
					{Name: "docs", URL: "https://docs.example/mcp", Headers: map[string]string{"Authorization": "Bearer x"}},
				}}},
			Command{ID: "cmd-2", Action: ActionPause, WorkerID: "w-1"},
			Command{ID: "cmd-3", Action: ActionSetBudget, ProjectID: "proj-a", Budget: &Budget{LimitUSD: 50, WarnUSD: 40}},
			Command{ID: "cmd-3", Action: ActionList, ReplyTo: "worker:replies:ctl"},
			Command{ID: "cmd-4", Action: ActionResetContext, ProjectID: "proj-a", AgentType: AgentDroid},
		},
		"reply.schema.json": {
			Reply{CommandID: "cmd-1", Action: ActionCreate, OK: true, WorkerID: "w-1", Timestamp: sampleTime,
				Worker: &WorkerInfo{WorkerID: "w-1", Status: ContainerRunning, State: WorkerIdle, Health: HealthHealthy,
					AgentType: AgentClaude, Kind: KindLongLived, ContainerID: "abc", Image: "worker:33bbee26d5ffde18",
					StartedAt: sampleTime, UpdatedAt: sampleTime}},
			Reply{CommandID: "cmd-3", Action: ActionList, OK: true, Timestamp: sampleTime, Workers: []WorkerInfo{
				{WorkerID: "w-1", Status: ContainerPaused}, {WorkerID: "w-2", Status: ContainerFailed, ExitCode: &exit, Error: "OOM_KILLED: x"}}},
			Reply{CommandID: "cmd-9", Action: ActionCreate, OK: false, Timestamp: sampleTime,
				Error: NewError(CodeResourceExhausted, "no slot freed within 5m0s")},
		},
		"control.schema.json": {
			Control{Action: ControlPause, WorkerID: "w-1", Reason: "stop_output:complete", RequestID: "req-1", Timestamp: sampleTime},
		},
	}
}
