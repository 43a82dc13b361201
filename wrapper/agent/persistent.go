package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Persistent is one agent process kept alive across the messages of a
// long-lived worker (`claude -p --input-format stream-json`): a follow-up
// needs neither a new process nor a resume. Its methods are called from
// one goroutine.
type Persistent struct {
	spec   Spec
	pgid   int
	stdin  *os.File
	stdout *os.File
	events chan []Event // from the reading goroutine; closed at the end of stdout
	exitCh <-chan ExitStatus
	stderr *tail
	rel    func() error

	dead bool
	exit ExitStatus
	init *Init // the process's init line; Claude repeats it for every message
	once sync.Once
}

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
	p := &Persistent{spec: spec, pgid: cmd.Process.Pid, stdin: inW, stdout: stdout, events: make(chan []Event, 64),
		exitCh: exitCh, stderr: newTail(spec.StderrTail), rel: cmd.Process.Release}
	go func() { _, _ = io.Copy(p.stderr, stderr); stderr.Close() }()
	go func() {
		defer close(p.events)
		lr := NewLineReader(stdout, spec.MaxLine)
		for {
			line, err := lr.Next()
			if errors.Is(err, ErrLineTooLong) {
				continue
			}
			if err != nil {
				return
			}
			if evs := spec.Parser.ParseLine(line); len(evs) > 0 {
				p.events <- evs
			}
		}
	}()
	if spec.OnStart != nil {
		spec.OnStart(p.pgid)
	}
	return p, nil
}

// Initialize sends Claude's initialize control request and waits for its
// answer: Claude then has loaded what it loads before its first turn, so
// a process started ahead of its first message (prewarm) can be frozen
// ready. Events other than the answer are dropped (none come before a
// first message).
func (p *Persistent) Initialize(timeout time.Duration) error {
	b, _ := json.Marshal(map[string]any{"type": "control_request", "request_id": "initialize",
		"request": map[string]any{"subtype": "initialize"}})
	if _, err := p.stdin.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("agent: initialize: %w", err)
	}
	deadline := time.After(timeout)
	for {
		select {
		case evs, ok := <-p.events:
			if !ok {
				return fmt.Errorf("agent: initialize: the process ended")
			}
			for _, ev := range evs {
				if c := ev.Control; c != nil && c.RequestID == "initialize" {
					if c.Subtype != "success" {
						return fmt.Errorf("agent: initialize: %s", c.Error)
					}
					return nil
				}
			}
		case <-deadline:
			return fmt.Errorf("agent: initialize: no answer within %s", timeout)
		}
	}
}

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

// Send writes one message and waits for its result line. The outcome is
// that of the one message; when the process died, timed out or was
// cancelled meanwhile, it is no longer Alive and the outcome says why.
func (p *Persistent) Send(ctx context.Context, message []byte, timeout time.Duration, onEvent func(Event)) (out Outcome) {
	out.Init = p.init
	start := time.Now()
	defer func() { out.Duration = time.Since(start) }()
	if p.dead {
		out.Exit, out.Stderr = p.exit, p.stderr.String()
		return out
	}
	var tm <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		tm = t.C
	}
	// The write blocks while the process does not read (a full pipe): the
	// timeout and ctx bound it as they bound the wait for the result.
	written := make(chan error, 1)
	go func() {
		_, err := p.stdin.Write(message)
		written <- err
	}()
	select {
	case err := <-written:
		if err != nil {
			p.kill()
			out.Exit, out.Stderr = p.waitExit(), p.stderr.String()
			return out
		}
	case <-tm:
		out.TimedOut = true
		p.abandonWrite(written)
		out.Exit, out.Stderr = p.exit, p.stderr.String()
		return out
	case <-ctx.Done():
		out.Cancelled = true
		p.abandonWrite(written)
		out.Exit, out.Stderr = p.exit, p.stderr.String()
		return out
	}
	for {
		select {
		case evs, ok := <-p.events:
			if !ok { // stdout ended: the process is gone
				p.dead = true
				out.Exit, out.Stderr = p.waitExit(), p.stderr.String()
				return out
			}
			for _, ev := range evs {
				out.record(ev, time.Since(start))
				if ev.Init != nil {
					p.init = ev.Init
				}
				if onEvent != nil {
					onEvent(ev)
				}
				if ev.Result != nil {
					return out
				}
			}
		case st := <-p.exitCh:
			p.exitCh = nil
			p.dead, p.exit = true, st
			// Read what it printed before it died, for a moment.
			drain := time.After(p.spec.DrainGrace)
			for {
				select {
				case evs, ok := <-p.events:
					if !ok {
						out.Exit, out.Stderr = st, p.stderr.String()
						return out
					}
					for _, ev := range evs {
						out.record(ev, time.Since(start))
					}
				case <-drain:
					p.kill()
					out.Exit, out.Stderr = st, p.stderr.String()
					return out
				}
			}
		case <-tm:
			out.TimedOut = true
			p.stop()
			out.Exit, out.Stderr = p.exit, p.stderr.String()
			return out
		case <-ctx.Done():
			out.Cancelled = true
			p.stop()
			out.Exit, out.Stderr = p.exit, p.stderr.String()
			return out
		}
	}
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
// group if it does not exit within KillGrace.
func (p *Persistent) Close() {
	p.closeStdin()
	if !p.dead {
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
