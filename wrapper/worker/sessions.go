package worker

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/wrapper/agent"
	"github.com/agentvisor/agentvisor/wrapper/internal/rdb"
)

// SessionPlan is how a task's agent session was chosen.
type SessionPlan struct {
	ResumeID string // the session to continue; "" for a new one
	Context  string // the project's stored context, injected into a new session
	Decision protocol.SessionDecision
	held     bool // this worker holds the project's session record
}

// SessionPolicy chooses the agent session of each task and learns from
// each run. Sessions belong to a project, not to a task.
type SessionPolicy interface {
	// Decide chooses the session of a task before its agent starts.
	Decide(ctx context.Context, task protocol.Task) SessionPlan
	// Complete sees the outcome of the run. It may run the task again,
	// through rerun, in a new session (a resume that failed), and returns
	// the outcome and plan that stand.
	Complete(ctx context.Context, task protocol.Task, plan SessionPlan, o agent.Outcome,
		rerun func(Invocation) agent.Outcome) (agent.Outcome, SessionPlan)
}

// NewSessions runs every task in a new session (SESSION_POLICY=new).
type NewSessions struct{}

var _ SessionPolicy = NewSessions{}

// Decide implements SessionPolicy.
func (NewSessions) Decide(_ context.Context, task protocol.Task) SessionPlan {
	reason := protocol.SessionReasonNoSession
	if task.ForceNewSession {
		reason = protocol.SessionReasonForced
	}
	return SessionPlan{Decision: protocol.SessionDecision{Action: protocol.SessionNew, Reason: reason}}
}

// Complete implements SessionPolicy.
func (NewSessions) Complete(_ context.Context, _ protocol.Task, plan SessionPlan, o agent.Outcome,
	_ func(Invocation) agent.Outcome) (agent.Outcome, SessionPlan) {
	return o, plan
}

// SessionConfig tunes ProjectSessions.
type SessionConfig struct {
	// ContextThreshold: a session whose context reached it is retired
	// (default 150 000, of a DefaultContextWindow window). When the agent
	// reports its model's context window, the threshold scales with it:
	// window × ContextThreshold / DefaultContextWindow.
	ContextThreshold int64
	StaleAfter       time.Duration // default 24 h
	Affinity         time.Duration // how long the project's session stays bound to this worker (default 30 min)
	Summarize        bool          // ask the old session for a summary when retiring it (default true)
}

func (c SessionConfig) withDefaults() SessionConfig {
	if c.ContextThreshold <= 0 {
		c.ContextThreshold = 150_000
	}
	if c.StaleAfter <= 0 {
		c.StaleAfter = 24 * time.Hour
	}
	if c.Affinity <= 0 {
		c.Affinity = 30 * time.Minute
	}
	return c
}

// SummaryPrompt is the one more turn a retiring session is asked.
const SummaryPrompt = `This session is about to be retired; a new session will continue the project from a summary.
Write the project's context for that new session, in Markdown, under these headings:
## Architecture
## Decisions
## Known issues
## File structure
Be concise and concrete. Do not change any file. End with {"status": "complete"}.`

// ProjectSessions continues a project's session while every condition
// holds (same project and agent type, context below the threshold, last
// activity recent enough, no force_new_session), and starts a new one
// otherwise. It keeps the session record and the project's context in
// Redis, so that a replacement worker can resume.
//
// Two workers that race for one project: the first to claim the record
// holds it (for Affinity after its last task); the other runs its task in a
// new session of its own that is not recorded.
type ProjectSessions struct {
	d   SessionDeps
	cfg SessionConfig
}

// SessionStore is what ProjectSessions keeps in Redis: the project's
// session record and its stored context.
type SessionStore interface {
	ClaimSession(ctx context.Context, agent protocol.AgentType, project, workerID string, now, expires time.Time) (rdb.SessionRecord, error)
	SaveSession(ctx context.Context, agent protocol.AgentType, project, workerID string, newSession bool, costUSD float64, fields map[string]any) (bool, error)
	ProjectContext(ctx context.Context, project string) (string, error)
	SetProjectContext(ctx context.Context, project, text string) error
}

var _ SessionStore = (*rdb.RDB)(nil)

// TurnRunner runs one turn of the policy's own in the agent (a retiring
// session's summary), within timeout.
type TurnRunner func(ctx context.Context, task protocol.Task, inv Invocation, timeout time.Duration) agent.Outcome

// SessionDeps are what ProjectSessions works with: the store, a runner for
// its own turns, the clock, and whose sessions they are.
type SessionDeps struct {
	Store     SessionStore
	Run       TurnRunner
	Now       func() time.Time
	Log       *slog.Logger
	AgentType protocol.AgentType
	// Agent builds a new session's invocation (Adapter.WithContext).
	Agent    agent.Adapter
	WorkerID string
	// Redact, when set, cleans a summary of secrets before it is stored.
	Redact func(string) string
	// Files, when set, saves the session's files to the session store
	// after each task and restores them before a resume when they are not
	// here.
	Files *SessionFiles
}

// NewProjectSessions returns the project policy.
func NewProjectSessions(d SessionDeps, cfg SessionConfig) *ProjectSessions {
	return &ProjectSessions{d: d, cfg: cfg.withDefaults()}
}

var _ SessionPolicy = (*ProjectSessions)(nil)

func (p *ProjectSessions) log() *slog.Logger { return p.d.Log }

// DefaultContextWindow is the model context window ContextThreshold is
// given against.
const DefaultContextWindow = 200_000

// threshold is the context size at which a session is retired.
func (p *ProjectSessions) threshold(window int64) int64 {
	if window > 0 {
		return window * p.cfg.ContextThreshold / DefaultContextWindow
	}
	return p.cfg.ContextThreshold
}

// Decide implements SessionPolicy.
func (p *ProjectSessions) Decide(ctx context.Context, task protocol.Task) SessionPlan {
	d := p.d
	now := d.Now()
	project := task.Project()
	rec, err := d.Store.ClaimSession(ctx, d.AgentType, project, d.WorkerID, now, now.Add(p.cfg.Affinity))
	if err != nil {
		p.log().Warn("session store unreachable: new session", "err", err, "project_id", project)
		return SessionPlan{Decision: protocol.SessionDecision{Action: protocol.SessionNew, Reason: protocol.SessionReasonNoSession}}
	}
	plan := SessionPlan{held: rec.Claimed}
	plan.Context, _ = d.Store.ProjectContext(ctx, project)
	prev := rec.Fields[protocol.SessionFieldSessionID]
	newPlan := func(reason string) SessionPlan {
		plan.Decision = protocol.SessionDecision{Action: protocol.SessionNew, Reason: reason, PreviousSessionID: prev}
		return plan
	}
	last, _ := protocol.ParseTime(rec.Fields[protocol.SessionFieldLastActivity])
	tokens := rdb.Int64Field(rec.Fields, protocol.SessionFieldContextTokens)
	window := rdb.Int64Field(rec.Fields, protocol.SessionFieldContextWindow)
	switch {
	case !rec.Claimed:
		return newPlan(protocol.SessionReasonHeld)
	case prev == "":
		return newPlan(protocol.SessionReasonNoSession)
	case task.ForceNewSession:
		return newPlan(protocol.SessionReasonForced)
	case now.Sub(last) >= p.cfg.StaleAfter:
		p.retire(ctx, project, prev)
		plan.Context, _ = d.Store.ProjectContext(ctx, project)
		return newPlan(protocol.SessionReasonStale)
	case tokens >= p.threshold(window):
		p.retire(ctx, project, prev)
		plan.Context, _ = d.Store.ProjectContext(ctx, project)
		return newPlan(protocol.SessionReasonOverflow)
	}
	plan.ResumeID = prev
	plan.Decision = protocol.SessionDecision{Action: protocol.SessionResume, Reason: protocol.SessionReasonContinued, PreviousSessionID: prev}
	p.restoreFiles(ctx, project, prev)
	return plan
}

// restoreFiles brings a session's files from the session store when this
// container has none (a resume without them fails and falls back to a new
// session with the project's context, saying so).
func (p *ProjectSessions) restoreFiles(ctx context.Context, project, sessionID string) {
	if p.d.Files == nil {
		return
	}
	start := p.d.Now()
	ok, err := p.d.Files.Restore(ctx, p.d.AgentType, project, sessionID)
	switch {
	case err != nil:
		p.log().Warn("session files not restored from the session store", "session_id", sessionID, "project_id", project, "err", err)
	case ok:
		p.log().Info("session files restored from the session store", "session_id", sessionID, "project_id", project, "took", p.d.Now().Sub(start).String())
	}
}

// summaryTimeout bounds a retiring session's summary turn.
const summaryTimeout = 5 * time.Minute

// retire asks the old session, in one more turn, for a summary of the
// project and stores it as the project's context. A summary that fails
// leaves the stored context as it was.
func (p *ProjectSessions) retire(ctx context.Context, project, sessionID string) {
	if !p.cfg.Summarize {
		return
	}
	task := protocol.Task{RequestID: "summary-" + sessionID, ProjectID: project, Prompt: SummaryPrompt}
	o := p.d.Run(ctx, task, Invocation{Prompt: SummaryPrompt, ResumeID: sessionID}, summaryTimeout)
	if o.Result == nil || o.Result.IsError || strings.TrimSpace(o.Result.Text) == "" {
		p.log().Warn("session summary failed; the project keeps its previous context", "project_id", project, "session_id", sessionID)
		return
	}
	text := o.Result.Text
	if i := strings.LastIndex(text, `{"status"`); i > 0 {
		text = strings.TrimSpace(text[:i])
	}
	if p.d.Redact != nil {
		text = p.d.Redact(text)
	}
	if err := p.d.Store.SetProjectContext(ctx, project, text); err != nil {
		p.log().Warn("store project context", "err", err)
		return
	}
	p.log().Info("session retired with a summary", "project_id", project, "session_id", sessionID, "summary_bytes", len(text))
}

// resumeFailed tells a resume that failed before the agent did anything:
// no init line, and no result or only an error result (Claude with
// stream-json prints an error result with no turns and "No conversation
// found with session ID" on stderr; Droid, which fetches sessions from its
// vendor's cloud, exits 1 with nothing on stdout; a session file lost with
// its container looks the same).
func resumeFailed(plan SessionPlan, o agent.Outcome) (bool, string) {
	if plan.ResumeID == "" || o.Init != nil || o.StartErr != nil || o.TimedOut || o.Cancelled || o.Aborted != nil {
		return false, ""
	}
	if o.Result != nil && (!o.Result.IsError || o.Result.Turns > 0) {
		return false, ""
	}
	if strings.Contains(o.Stderr, "No conversation found") {
		return true, strings.TrimSpace(o.Stderr)
	}
	if o.Result != nil { // an error result of no turns, before any init line
		return true, fmt.Sprintf("the agent could not resume session %s: %s (%s) %s", plan.ResumeID, o.Result.Subtype, o.Result.Text, strings.TrimSpace(o.Stderr))
	}
	if o.Exit.Code != 0 {
		return true, fmt.Sprintf("the agent could not resume session %s (%s before its init line): %s", plan.ResumeID, o.Exit, strings.TrimSpace(o.Stderr))
	}
	return false, ""
}

// Complete implements SessionPolicy.
func (p *ProjectSessions) Complete(ctx context.Context, task protocol.Task, plan SessionPlan, o agent.Outcome,
	rerun func(Invocation) agent.Outcome) (agent.Outcome, SessionPlan) {
	d := p.d
	if failed, msg := resumeFailed(plan, o); failed && !o.Interrupted {
		p.log().Warn("resume failed: running the task again in a new session", "session_id", plan.ResumeID, "request_id", task.RequestID)
		plan.Decision = protocol.SessionDecision{Action: protocol.SessionNew, Reason: protocol.SessionReasonResumeFailed,
			PreviousSessionID: plan.ResumeID, ResumeError: protocol.NewError(protocol.CodeResumeFailed, "%s", truncate(msg, 2000))}
		plan.ResumeID = ""
		o = rerun(p.invocation(task, plan))
	}
	// An interrupted turn (a cancel) ends in an error result, or in none
	// (Claude -p exits on SIGINT without one when its telemetry is off),
	// but its session holds the turns so far and stays the project's.
	if o.Result == nil && !(o.Interrupted && o.Init != nil) {
		return o, plan
	}
	var (
		sid           string
		contextTokens int64
		window        int64
		cost          float64
	)
	if r := o.Result; r != nil {
		sid, contextTokens, window, cost = r.SessionID, r.Usage.Context(), r.ContextWindow, r.CostUSD
	}
	if sid == "" && o.Init != nil {
		sid = o.Init.SessionID
	}
	if o.LastTurn != nil {
		contextTokens = o.LastTurn.Usage.Context()
	}
	now := d.Now()
	if !plan.held || sid == "" || (o.Result != nil && o.Result.IsError && !o.Interrupted) {
		return o, plan
	}
	fields := map[string]any{
		protocol.SessionFieldSessionID:       sid,
		protocol.SessionFieldAgentType:       string(d.AgentType),
		protocol.SessionFieldProjectID:       task.Project(),
		protocol.SessionFieldContextTokens:   contextTokens,
		protocol.SessionFieldContextWindow:   window,
		protocol.SessionFieldLastActivity:    protocol.FormatTime(now),
		protocol.SessionFieldWorkerExpires:   protocol.FormatTime(now.Add(p.cfg.Affinity)),
		protocol.SessionFieldWorkerExpiresMS: strconv.FormatInt(now.Add(p.cfg.Affinity).UnixMilli(), 10),
	}
	isNew := plan.Decision.Action == protocol.SessionNew
	if isNew {
		fields[protocol.SessionFieldCreatedAt] = protocol.FormatTime(now)
	}
	if _, err := d.Store.SaveSession(ctx, d.AgentType, task.Project(), d.WorkerID, isNew, cost, fields); err != nil {
		p.log().Warn("session not recorded", "err", err)
	}
	if d.Files != nil {
		if err := d.Files.Save(ctx, d.AgentType, task.Project(), sid); err != nil {
			p.log().Warn("session files not saved to the session store", "session_id", sid, "err", err)
		}
	}
	p.log().Info("session recorded", "project_id", task.Project(), "session_id", sid, "action", plan.Decision.Action,
		"reason", plan.Decision.Reason, "context_tokens", contextTokens, "threshold", p.threshold(window))
	return o, plan
}

// invocation is the command line of a task in plan's session.
func (p *ProjectSessions) invocation(task protocol.Task, plan SessionPlan) Invocation {
	return invocationFor(p.d.Agent, task, plan)
}

// invocationFor is the command line of a task in plan's session; a new
// session carries the project's context where its agent takes it.
func invocationFor(ad agent.Adapter, task protocol.Task, plan SessionPlan) Invocation {
	inv := Invocation{Prompt: task.Prompt, ResumeID: plan.ResumeID, MaxBudgetUSD: task.MaxBudgetUSD}
	if plan.ResumeID != "" || strings.TrimSpace(plan.Context) == "" {
		return inv
	}
	return ad.WithContext(inv, "# Project context (from earlier sessions of this project)\n"+plan.Context)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
