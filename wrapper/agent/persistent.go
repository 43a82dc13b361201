package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

// Persistent is one agent process kept alive across the messages of a
// long-lived worker (`claude -p --input-format stream-json`, `droid exec
// --input-format stream-jsonrpc`): a follow-up needs neither a new process
// nor a resume. Its methods are called from one goroutine.
type Persistent struct {
	spec    Spec
	dialect Dialect
	pgid    int
	stdin   *os.File
	stdout  *os.File
	events  chan []Event // from the reading goroutine; closed at the end of stdout
	exitCh  <-chan ExitStatus
	stderr  *tail
	rel     func() error

	// writeMu serialises writes to stdin: the task loop's messages and
	// interrupts, and Inject from other goroutines.
	writeMu sync.Mutex
	// replay: the process echoes the user messages it takes (Claude with
	// --replay-user-messages, Droid always), so a steering message that
	// came too late for a turn is seen starting the next one.
	replay   bool
	injected atomic.Int64 // messages injected into the current Send

	dead bool
	exit ExitStatus
	init *Init // the process's init line (Claude repeats it for every message) or its opened session (Droid)
	once sync.Once
}

// Dialect is how a persistent agent process takes its input: Claude's
// stream-json messages and control requests (ClaudeInput), Droid's
// JSON-RPC (DroidRPC), or the Agent Client Protocol (ACPClient).
type Dialect interface {
	// Open is the request that readies the process, and the id of its
	// answer (an Event.Control): Claude's initialize, Droid's session.
	Open() (line []byte, id string)
	// Message is a user message: a task's prompt, or (steer) one for the
	// turn in progress; nil when the agent takes none into a running turn.
	Message(text string, steer bool) []byte
	// Interrupt ends the turn in progress; the process stays.
	Interrupt() []byte
	// Refuse answers a request the agent made of its client
	// (Event.Request); nil when there is nothing to write.
	Refuse(r AgentRequest) []byte
	// Answer is the answer to a permission the agent asked
	// (Event.Permission); nil when the agent takes none (any more).
	Answer(ask PermissionAsk, allow bool, message string) []byte
	// Echoes reports whether the process echoes each user message it
	// takes (Event.Replay).
	Echoes() bool
	// KillOnClose reports whether Close kills the process's group as soon
	// as its stdin is closed, instead of giving it KillGrace to exit.
	KillOnClose() bool
}

// ClaudeInput is Claude's stream-json input (`claude -p --input-format
// stream-json`).
type ClaudeInput struct {
	// Replay: the process runs with --replay-user-messages.
	Replay bool
}

var _ Dialect = ClaudeInput{}

// Open implements Dialect: the initialize control request, which Claude
// answers once it has loaded what it loads before its first turn.
func (ClaudeInput) Open() ([]byte, string) {
	b, _ := json.Marshal(map[string]any{"type": "control_request", "request_id": "initialize",
		"request": map[string]any{"subtype": "initialize"}})
	return append(b, '\n'), "initialize"
}

// Message implements Dialect: Claude takes a steering message like any
// other, into the turn in progress.
func (ClaudeInput) Message(text string, _ bool) []byte { return ClaudeUserMessage(text) }

// Interrupt implements Dialect.
func (ClaudeInput) Interrupt() []byte {
	return ClaudeInterrupt(fmt.Sprintf("interrupt-%d", time.Now().UnixNano()))
}

// Refuse implements Dialect: Claude's requests (can_use_tool) are
// answered by AnswerPermission.
func (ClaudeInput) Refuse(AgentRequest) []byte { return nil }

// Answer implements Dialect: the control response to a can_use_tool
// request: allow (with the tool call's input unchanged) or deny (with a
// message the model reads).
func (ClaudeInput) Answer(ask PermissionAsk, allow bool, message string) []byte {
	var decision map[string]any
	if allow {
		input := ask.Input
		if len(input) == 0 {
			input = json.RawMessage(`{}`)
		}
		decision = map[string]any{"behavior": "allow", "updatedInput": input}
	} else {
		decision = map[string]any{"behavior": "deny", "message": message}
	}
	b, _ := json.Marshal(map[string]any{"type": "control_response", "response": map[string]any{
		"subtype": "success", "request_id": ask.ID, "response": decision}})
	return append(b, '\n')
}

// Echoes implements Dialect.
func (c ClaudeInput) Echoes() bool { return c.Replay }

// KillOnClose implements Dialect: Claude exits at once when its stdin
// closes, its session saved.
func (ClaudeInput) KillOnClose() bool { return false }

// ErrSessionNotFound is Open's error when the agent has no session of the
// id it was to resume.
var ErrSessionNotFound = errors.New("agent: session not found")

// ClaudeUserMessage is one user message in Claude's stream-json input.
func ClaudeUserMessage(prompt string) []byte {
	b, _ := json.Marshal(map[string]any{"type": "user", "message": map[string]any{
		"role": "user", "content": []any{map[string]any{"type": "text", "text": prompt}}}})
	return append(b, '\n')
}

// StartPersistent starts the agent with spec (whose Argv must make it read
// messages from stdin) and returns at once.
func StartPersistent(spec Spec) (*Persistent, error) {
	spec = withDefaults(spec)
	cmd := exec.Command(spec.Argv[0], spec.Argv[1:]...)
	cmd.Env, cmd.Dir = spec.Env, spec.Dir
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	stdout, stderr, childEnds, err := wireOutput(cmd, false)
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	cmd.Stdin = inR
	exitCh, err := spec.Starter.Start(cmd)
	inR.Close()
	for _, f := range childEnds {
		f.Close()
	}
	if err != nil {
		inW.Close()
		stdout.Close()
		stderr.Close()
		return nil, fmt.Errorf("agent: start %s: %w", spec.Argv[0], err)
	}
	dialect := spec.Dialect
	if dialect == nil {
		dialect = ClaudeInput{Replay: slices.Contains(spec.Argv, "--replay-user-messages")}
	}
	p := &Persistent{spec: spec, dialect: dialect, pgid: cmd.Process.Pid, stdin: inW, stdout: stdout, events: make(chan []Event, 64),
		exitCh: exitCh, stderr: newTail(spec.StderrTail), rel: cmd.Process.Release, replay: dialect.Echoes()}
	go func() { _, _ = io.Copy(p.stderr, stderr); stderr.Close() }()
	reader := &eventReader{parser: spec.Parser, maxLine: spec.MaxLine}
	go reader.read(stdout, p.events)
	if spec.OnStart != nil {
		spec.OnStart(p.pgid)
	}
	return p, nil
}

// Open writes the dialect's opening request and waits for its answer:
// Claude has then loaded what it loads before its first turn (so a process
// started ahead of its first message can be frozen ready), Droid has its
// session (it takes no message before). A Droid session to resume that
// it does not have gives ErrSessionNotFound. Events other than the answer
// and the init are dropped (none of a turn come before a first message).
func (p *Persistent) Open(timeout time.Duration) error {
	line, id := p.dialect.Open()
	if _, err := p.stdin.Write(line); err != nil {
		return fmt.Errorf("agent: open: %w", err)
	}
	deadline := time.After(timeout)
	for {
		select {
		case evs, ok := <-p.events:
			if !ok {
				return fmt.Errorf("agent: open: the process ended: %s", p.stderr.String())
			}
			for _, ev := range evs {
				if ev.Init != nil {
					p.init = ev.Init
				}
				if ev.Write != nil {
					if err := p.write(ev.Write); err != nil {
						return fmt.Errorf("agent: open: %w", err)
					}
				}
				c := ev.Control
				if c == nil || c.RequestID != id {
					continue
				}
				switch {
				case c.Subtype == "success":
					return nil
				case c.Code == droidSessionNotFound || c.NotFound:
					return fmt.Errorf("%w: %s", ErrSessionNotFound, c.Error)
				}
				return fmt.Errorf("agent: open: %s", c.Error)
			}
		case <-deadline:
			return fmt.Errorf("agent: open: no answer within %s", timeout)
		}
	}
}

// Message is a task's prompt as the process takes it.
func (p *Persistent) Message(text string) []byte { return p.dialect.Message(text, false) }

// Pid returns the agent's pid (the leader of its process group).
func (p *Persistent) Pid() int { return p.pgid }

// Alive reports whether the process still serves messages, as far as is
// known without waiting.
func (p *Persistent) Alive() bool {
	if !p.dead && p.exitCh != nil {
		select {
		case st := <-p.exitCh:
			p.exitCh, p.dead, p.exit = nil, true, st
		default:
		}
	}
	return !p.dead
}

// Inject writes a user message into the running turn (a steering
// message): Claude adds it to its next model call of the turn, or, when
// the turn is in its last call, answers it in a turn of its own right
// after, which the Send in progress waits for too (when the process echoes
// what it takes). Safe from any goroutine.
func (p *Persistent) Inject(text string) error {
	b := p.dialect.Message(text, true)
	if b == nil {
		return ErrNoSteer
	}
	p.injected.Add(1)
	return p.write(b)
}

func (p *Persistent) write(b []byte) error {
	p.writeMu.Lock()
	defer p.writeMu.Unlock()
	_, err := p.stdin.Write(b)
	return err
}

// AnswerPermission answers a permission the agent asked (Claude's
// can_use_tool, an ACP agent's session/request_permission): allow, or
// deny with a message the model reads. Safe from any goroutine.
func (p *Persistent) AnswerPermission(ask PermissionAsk, allow bool, message string) error {
	b := p.dialect.Answer(ask, allow, message)
	if b == nil {
		return ErrNoAnswer
	}
	return p.write(b)
}

// ErrNoAnswer is AnswerPermission's error when the agent no longer waits
// for the answer (its turn was cancelled), or takes none.
var ErrNoAnswer = errors.New("agent: the agent does not wait for this answer")

// ErrNoSteer is Inject's error for an agent that takes no message into a
// running turn (ACP): the message waits for the next turn.
var ErrNoSteer = errors.New("agent: the agent takes no message into a running turn")

// ClaudeInterrupt is the control request that ends Claude's turn in
// progress in stream-json input mode; the process stays for the next
// message. Claude answers with a control_response line, then the turn's
// error result (subtype error_during_execution).
func ClaudeInterrupt(id string) []byte {
	b, _ := json.Marshal(map[string]any{"type": "control_request", "request_id": id,
		"request": map[string]any{"subtype": "interrupt"}})
	return append(b, '\n')
}

// Send writes one message and waits for its result line. The outcome is
// that of the one message; when the process died, timed out or was
// cancelled meanwhile, it is no longer Alive and the outcome says why.
func (p *Persistent) Send(ctx context.Context, message []byte, timeout time.Duration, onEvent func(Event)) Outcome {
	return p.SendInterruptible(ctx, message, timeout, nil, onEvent)
}

// SendInterruptible is Send whose turn ends early when interrupt closes:
// the process gets its dialect's Interrupt on its stdin and stays alive
// when it answers with a result within the spec's InterruptGrace
// (doubled: the interrupt rides on the same pipe as the messages);
// otherwise it is stopped. The outcome is then Interrupted.
func (p *Persistent) SendInterruptible(ctx context.Context, message []byte, timeout time.Duration, interrupt <-chan struct{}, onEvent func(Event)) (out Outcome) {
	out.Init = p.init
	start := time.Now()
	defer func() { out.Duration = time.Since(start) }()
	if p.dead {
		out.Exit, out.Stderr = p.exit, p.stderr.String()
		return out
	}
	tm, release := deadline(timeout)
	defer release()
	if !p.writeMessage(ctx, message, tm, &out) {
		return out
	}
	t := &turn{p: p, out: &out}
	s := &supervisor{
		out: &out, start: start, spec: &p.spec,
		events: p.events, exits: p.exitCh, done: ctx.Done(), deadline: tm,
		interrupt: interrupt, interruptGrace: 2 * p.spec.InterruptGrace, onEvent: onEvent,
		terminate: p.stop, kill: p.kill, signalInterrupt: t.interrupt,
		see: t.see, turnEnds: t.ends, onExit: t.exited,
	}
	switch s.run() {
	case endTurn:
	case endClosed: // stdout ended: the process is gone
		p.dead = true
		out.Exit, out.Stderr = p.waitExit(), p.stderr.String()
	default:
		out.Exit, out.Stderr = p.exit, p.stderr.String()
	}
	return out
}

// writeMessage writes message to the process and reports whether it went.
// The write blocks while the process does not read (a full pipe): the
// timeout and ctx bound it as they bound the wait for the result, and when
// the message did not go, out says why.
func (p *Persistent) writeMessage(ctx context.Context, message []byte, timeout <-chan time.Time, out *Outcome) bool {
	p.injected.Store(0)
	written := make(chan error, 1)
	go func() { written <- p.write(message) }()
	select {
	case err := <-written:
		if err == nil {
			return true
		}
		// Its stdin is gone: the process exited, or is exiting. What it
		// printed before is still in its output: keep it (its result, or
		// the error that ended it).
		p.kill()
		p.drainInto(out)
		out.Exit = p.waitExit()
	case <-timeout:
		out.TimedOut = true
		p.abandonWrite(written)
		out.Exit = p.exit
	case <-ctx.Done():
		out.Cancelled = true
		p.abandonWrite(written)
		out.Exit = p.exit
	}
	out.Stderr = p.stderr.String()
	return false
}

// drainInto records in out the events of a process that is gone, until
// its output ends, or for DrainGrace when a process that left its group
// holds it.
func (p *Persistent) drainInto(out *Outcome) {
	start := time.Now()
	readToEnd(p.events, p.spec.DrainGrace, func(ev Event) {
		if ev.Init != nil {
			p.init = ev.Init
		}
		out.record(ev, time.Since(start))
	})
}

// turn is what one message's turn means to a persistent process: the
// events that tell it about itself, its requests to refuse, and when the
// turn is over.
type turn struct {
	p           *Persistent
	out         *Outcome
	echoed      int64          // user messages the process echoed (replay)
	carried     protocol.Usage // of the turns before the last, when a steering message made another
	carriedCost float64
}

func (t *turn) interrupt() { go func() { _ = t.p.write(t.p.dialect.Interrupt()) }() }

func (t *turn) exited(st ExitStatus) {
	t.p.exitCh, t.p.dead, t.p.exit = nil, true, st
}

func (t *turn) see(ev Event) {
	if ev.Init != nil {
		t.p.init = ev.Init
	}
	if ev.Request != nil {
		if b := t.p.dialect.Refuse(*ev.Request); b != nil {
			go func() { _ = t.p.write(b) }()
		}
	}
	if ev.Write != nil {
		go func() { _ = t.p.write(ev.Write) }()
	}
	if ev.Replay {
		t.echoed++
	}
}

// ends reports whether ev is the result that ends the turn, and then adds
// to it the usage of the results before that did not.
func (t *turn) ends(ev Event) bool {
	if ev.Result == nil {
		return false
	}
	if t.p.replay && !t.out.Interrupted && t.echoed < 1+t.p.injected.Load() {
		// A steering message came too late for this turn: Claude answers
		// it in the next, part of this task.
		t.carried = t.carried.Add(ev.Result.Usage)
		t.carriedCost += ev.Result.CostUSD
		return false
	}
	if t.out.Result != nil && (t.carried != protocol.Usage{} || t.carriedCost > 0) {
		r := *t.out.Result
		r.Usage, r.CostUSD = r.Usage.Add(t.carried), r.CostUSD+t.carriedCost
		t.out.Result = &r
	}
	return true
}

// abandonWrite stops the process while a write to its stdin is blocked,
// and waits for the write to give up: closing stdin ends it at once.
func (p *Persistent) abandonWrite(written <-chan error) {
	p.closeStdin()
	p.stop()
	<-written
}

func (p *Persistent) closeStdin() { p.once.Do(func() { p.stdin.Close() }) }

// Close ends the process: stdin closed, then SIGTERM and SIGKILL of its
// group if it does not exit within KillGrace (at once when the dialect
// says so).
func (p *Persistent) Close() {
	p.closeStdin()
	if !p.dead && p.dialect.KillOnClose() {
		signalGroup(p.pgid, syscall.SIGKILL)
		p.exit = p.waitExit()
	} else if !p.dead {
		select {
		case st := <-p.exitCh:
			p.exitCh, p.exit = nil, st
		case <-time.After(p.spec.KillGrace):
			p.stop()
		}
	}
	p.dead = true
	signalGroup(p.pgid, syscall.SIGKILL)
	p.stdout.Close()
	_ = p.rel()
}

// stop sends SIGTERM to the group, SIGKILL after KillGrace, and waits.
func (p *Persistent) stop() {
	signalGroup(p.pgid, syscall.SIGTERM)
	select {
	case st, ok := <-p.exitCh:
		if ok {
			p.exit = st
		}
	case <-time.After(p.spec.KillGrace):
		signalGroup(p.pgid, syscall.SIGKILL)
		p.exit = p.waitExit()
	}
	p.exitCh, p.dead = nil, true
	signalGroup(p.pgid, syscall.SIGKILL)
}

func (p *Persistent) kill() {
	p.dead = true
	signalGroup(p.pgid, syscall.SIGKILL)
}

func (p *Persistent) waitExit() ExitStatus {
	if p.exitCh == nil {
		return p.exit
	}
	select {
	case st := <-p.exitCh:
		p.exitCh, p.exit = nil, st
	case <-time.After(p.spec.KillGrace):
	}
	return p.exit
}
