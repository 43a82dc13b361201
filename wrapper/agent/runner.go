package agent

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/agentvisor/agentvisor/protocol"
)

// Spec says how to run one agent process.
type Spec struct {
	Argv   []string
	Env    []string // the whole environment of the agent
	Dir    string
	Parser Parser
	// Dialect is how a persistent process (StartPersistent) takes its
	// input; nil: Claude's stream-json (ClaudeInput, echoing its messages
	// when Argv has --replay-user-messages). Run ignores it.
	Dialect Dialect
	// PTY runs the agent on a pseudo-terminal (for agents or modes that
	// need one); its output is cleaned of escape sequences and CRs before
	// parsing. Stderr then merges into the same stream.
	PTY bool
	// Timeout ends the agent (its whole process group) and gives a timed
	// out outcome; 0 means none.
	Timeout time.Duration
	// ResultGrace is how long the agent may take to exit after its result
	// line before its group is killed (the result still counts).
	ResultGrace time.Duration
	// DrainGrace is how long, after the agent exited, a child that still
	// holds its stdout may keep it open before the group is killed.
	DrainGrace time.Duration
	// KillGrace is the time between SIGTERM and SIGKILL when the agent is
	// stopped (timeout, cancellation).
	KillGrace time.Duration
	// MaxLine bounds one output line (0: DefaultMaxLine).
	MaxLine int
	// StderrTail is how many bytes of stderr the outcome keeps (0: 8 KiB).
	StderrTail int
	// Stdin is what the agent reads on its standard input (the prompt), from
	// an unlinked temporary file; nil gives it /dev/null. Ignored on a pty.
	Stdin []byte
	// OnEvent, when set, is called for every event in order, from Run's
	// goroutine. It must not block.
	OnEvent func(Event)
	// StallTimeout ends an agent that printed no line this long (its
	// group gets SIGTERM, then SIGKILL): the outcome is Stalled. 0: none.
	StallTimeout time.Duration
	// StallExempt, when set, is asked when the stall timeout passes: true
	// means the silence is known and not the agent's (its model call is
	// parked by the wrapper), and the watch starts again.
	StallExempt func() bool
	// Interrupt, when it closes, cancels the run: SIGINT to the agent's
	// group (Claude then ends its turn, keeps the turn in its session and
	// prints an error result), SIGTERM once it printed that result or
	// after InterruptGrace, SIGKILL KillGrace later. The outcome is
	// Interrupted unless a result came first.
	Interrupt <-chan struct{}
	// InterruptGrace is the time between SIGINT and SIGTERM (default 1 s).
	InterruptGrace time.Duration
	// OnStart, when set, is called with the pid once the agent runs.
	OnStart func(pid int)
	// Check, when set, is called for every event in order, before
	// OnEvent; an error it returns ends the run at once: the agent is
	// stopped (SIGTERM, SIGKILL after KillGrace), Outcome.Aborted holds
	// the error, and Judge fails the task with it. It must not block.
	Check func(Event) *protocol.Error
	// Starter starts the process (default DirectStarter).
	Starter Starter
	// Converse, when set, makes Run drive an agent that takes its prompt
	// on a control channel (ACP) as a persistent process for one message:
	// Converse gives the new process's dialect and parser; Run opens it,
	// sends Stdin as its one message, and closes it.
	Converse func() (Dialect, Parser)
	// OnProcess, when set, is called with that process once it is open
	// (the worker answers its permission requests through it).
	OnProcess func(*Persistent)
}

// Outcome is everything Run learnt about one agent process.
type Outcome struct {
	Init     *Init
	LastTurn *Turn // the last API call's usage; nil when the agent reports none
	// EarlierTurns sums the usage of the API calls before LastTurn.
	EarlierTurns protocol.Usage
	Result       *Result // the final result line; nil when there was none
	Retries      int     // API retries seen
	// LastRetry is the last API retry seen; APIError the agent's word for
	// an API call that failed for good. Nil when none.
	LastRetry *APIRetry
	APIError  *APIError

	Exit     ExitStatus
	StartErr error // the agent could not be started; Exit.Code is 127 or 126
	// Aborted is the error of Spec.Check that ended the run; nil when none.
	Aborted *protocol.Error

	TimedOut  bool // Spec.Timeout passed before a result
	Cancelled bool // the context ended before a result
	// Interrupted: Spec.Interrupt closed before a result of the agent's
	// own (the result line it prints when interrupted is kept in Result).
	Interrupted       bool
	Stalled           bool // no line for Spec.StallTimeout before a result
	KilledAfterResult bool // it did not exit within ResultGrace of its result
	KilledDraining    bool // a child held stdout past DrainGrace after the exit

	Stderr     string // the last StderrTail bytes of stderr
	Events     int    // events parsed from the output
	Lines      int    // lines read
	LongLines  int    // lines over MaxLine, skipped
	Duration   time.Duration
	ResultTime time.Duration // from start to the result line
}

// Run starts the agent and returns when it has exited and its output is
// read. Whatever happens, no process of the agent's process group survives
// Run: the group is killed at the end.
func Run(ctx context.Context, spec Spec) (out Outcome) {
	spec = withDefaults(spec)
	if spec.Converse != nil {
		return runConversation(ctx, spec)
	}
	start := time.Now()
	defer func() { out.Duration = time.Since(start) }()
	a, exit, err := startRun(spec)
	if err != nil {
		out.StartErr, out.Exit = err, exit
		return out
	}
	defer signalGroup(a.pgid, syscall.SIGKILL)
	defer a.cmd.Process.Release()
	if spec.OnStart != nil {
		spec.OnStart(a.pgid)
	}

	tail := newTail(spec.StderrTail)
	var stderrDone sync.WaitGroup
	if a.stderr != nil {
		stderrDone.Go(func() { _, _ = io.Copy(tail, a.stderr) })
	}
	reader := a.readOutput(spec, tail)
	timeout, release := deadline(spec.Timeout)
	defer release()
	a.supervisor(ctx, spec, &out, start, timeout).run()

	a.stdout.Close()
	signalGroup(a.pgid, syscall.SIGKILL)
	if a.stderr != nil {
		waitTimeout(&stderrDone, spec.DrainGrace, func() { a.stderr.Close() })
	}
	out.Lines, out.LongLines = reader.lines, reader.long
	out.Stderr = tail.String()
	return out
}

// runProc is an agent process Run started, the leader of its own process
// group.
type runProc struct {
	cmd            *exec.Cmd
	pgid           int
	stdout, stderr *os.File // stderr is nil on a pty, where it merges into stdout
	exits          <-chan ExitStatus
	events         chan []Event    // parsed from stdout by readOutput
	read           *countingReader // stdout, counting what was read
}

// startRun starts the agent of spec. When it cannot, the exit status says
// so: 126, or 127 for an agent not found.
func startRun(spec Spec) (*runProc, ExitStatus, error) {
	cmd := exec.Command(spec.Argv[0], spec.Argv[1:]...)
	cmd.Env = spec.Env
	cmd.Dir = spec.Dir
	stdout, stderr, childEnds, err := wireRun(cmd, spec)
	if err != nil {
		return nil, ExitStatus{Code: 126}, fmt.Errorf("agent: set up output of %s: %w", spec.Argv[0], err)
	}
	exits, err := spec.Starter.Start(cmd)
	closeAll(childEnds)
	if err != nil {
		stdout.Close()
		if stderr != nil {
			stderr.Close()
		}
		return nil, ExitStatus{Code: StartErrorCode(err)}, fmt.Errorf("agent: start %s: %w", spec.Argv[0], err)
	}
	// Setpgid/Setsid: the agent leads its own group.
	return &runProc{cmd: cmd, pgid: cmd.Process.Pid, stdout: stdout, stderr: stderr, exits: exits}, ExitStatus{}, nil
}

// wireRun gives the command its output (wireOutput) and, off a pty, its
// stdin: spec.Stdin, or /dev/null when nil.
func wireRun(cmd *exec.Cmd, spec Spec) (stdout, stderr *os.File, childEnds []*os.File, err error) {
	stdout, stderr, childEnds, err = wireOutput(cmd, spec.PTY)
	if err != nil || spec.PTY || spec.Stdin == nil {
		return stdout, stderr, childEnds, err
	}
	in, err := stdinFile(spec.Stdin)
	if err != nil {
		stdout.Close()
		stderr.Close()
		closeAll(childEnds)
		return nil, nil, nil, err
	}
	cmd.Stdin = in
	return stdout, stderr, append(childEnds, in), nil
}

// readOutput starts parsing stdout into a.events; the reader's counts of
// lines are final once a.events closed. On a pty, what is not JSON goes to
// tail, stderr's.
func (a *runProc) readOutput(spec Spec, tail *tail) *eventReader {
	a.events = make(chan []Event, 64)
	a.read = &countingReader{r: a.stdout}
	reader := &eventReader{parser: spec.Parser, maxLine: spec.MaxLine}
	if spec.PTY {
		reader.pty = tail
	}
	go reader.read(a.read, a.events)
	return reader
}

// supervisor supervises the whole process: signals to its group stop,
// kill and interrupt it, and a result ends its turn.
func (a *runProc) supervisor(ctx context.Context, spec Spec, out *Outcome, start time.Time, timeout <-chan time.Time) *supervisor {
	return &supervisor{
		out: out, start: start, spec: &spec, whole: true,
		events: a.events, exits: a.exits, done: ctx.Done(), deadline: timeout,
		interrupt: spec.Interrupt, interruptGrace: spec.InterruptGrace, onEvent: spec.OnEvent,
		terminate:       func() { signalGroup(a.pgid, syscall.SIGTERM) },
		kill:            func() { signalGroup(a.pgid, syscall.SIGKILL) },
		signalInterrupt: func() { signalGroup(a.pgid, syscall.SIGINT) },
		turnEnds:        func(ev Event) bool { return ev.Result != nil },
		outputRead:      a.read.n.Load,
		closeOutput:     func() { a.stdout.Close() },
	}
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// check runs a Spec.Check on ev, once no earlier event aborted the run,
// and reports whether it aborts the run now.
func (o *Outcome) check(check func(Event) *protocol.Error, ev Event) bool {
	if check == nil || o.Aborted != nil {
		return false
	}
	o.Aborted = check(ev)
	return o.Aborted != nil
}

// growPipe raises a pipe's capacity to the kernel's maximum for an
// unprivileged process (fs.pipe-max-size), best effort.
func growPipe(f *os.File) {
	size := 1 << 20
	if b, err := os.ReadFile("/proc/sys/fs/pipe-max-size"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n > 0 {
			size = n
		}
	}
	_, _ = unix.FcntlInt(f.Fd(), unix.F_SETPIPE_SZ, size)
}

// countingReader counts the bytes read through it, so that the run can
// tell a pipe still delivering from one that went quiet.
type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// hardDrainGrace bounds the wait for stdout to end after the agent's group
// was killed: only a process that left the group can hold it that long.
const hardDrainGrace = 10 * time.Second

// Record adds ev, seen at a time since the start, to the outcome as Run
// does: for a caller that follows a run's events (Spec.OnEvent) and needs
// an outcome before the run ends.
func (o *Outcome) Record(ev Event, at time.Duration) { o.record(ev, at) }

func (o *Outcome) record(ev Event, at time.Duration) {
	o.Events++
	switch {
	case ev.Init != nil:
		o.Init = ev.Init
	case ev.Turn != nil:
		// Claude repeats a message's usage on each of its content lines.
		if o.LastTurn != nil && o.LastTurn.MessageID != ev.Turn.MessageID {
			o.EarlierTurns = o.EarlierTurns.Add(o.LastTurn.Usage)
		}
		o.LastTurn = ev.Turn
	case ev.Retry != nil:
		o.Retries++
		o.LastRetry = ev.Retry
	case ev.APIError != nil:
		o.APIError = ev.APIError
	case ev.Result != nil:
		r := *ev.Result
		// Droid prints one error line per layer ("401 ...", then "Exec
		// failed"): keep them all, the first is the most telling.
		if o.Result != nil && o.Result.IsError && r.IsError {
			r.Text = o.Result.Text + "; " + r.Text
			if r.APIErrorStatus == 0 {
				r.APIErrorStatus = o.Result.APIErrorStatus
			}
		}
		o.Result = &r
		o.ResultTime = at
	}
}

// TurnsUsage sums the usage of every API call the agent reported (Claude
// does; Droid reports none): what a run used when it gave no result.
func (o Outcome) TurnsUsage() protocol.Usage {
	if o.LastTurn == nil {
		return o.EarlierTurns
	}
	return o.EarlierTurns.Add(o.LastTurn.Usage)
}

func withDefaults(s Spec) Spec {
	if s.Starter == nil {
		s.Starter = DirectStarter{}
	}
	if s.ResultGrace <= 0 {
		s.ResultGrace = 3 * time.Second
	}
	if s.DrainGrace <= 0 {
		s.DrainGrace = 2 * time.Second
	}
	if s.KillGrace <= 0 {
		s.KillGrace = 5 * time.Second
	}
	if s.InterruptGrace <= 0 {
		s.InterruptGrace = time.Second
	}
	if s.StderrTail <= 0 {
		s.StderrTail = 8 << 10
	}
	return s
}

// wireOutput gives the command its stdout and stderr (pipes, or a pty) in
// its own process group, and returns the parent's read ends and the child's
// ends, which the parent closes once the child runs.
func wireOutput(cmd *exec.Cmd, usePTY bool) (stdout, stderr *os.File, childEnds []*os.File, err error) {
	if usePTY {
		ptmx, tty, err := pty.Open()
		if err != nil {
			return nil, nil, nil, err
		}
		_ = pty.Setsize(ptmx, &pty.Winsize{Rows: 50, Cols: 200})
		cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
		// A new session with the pty as its terminal; the agent leads
		// both the session and its process group.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
		return ptmx, nil, []*os.File{tty}, nil
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, nil, nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, nil, nil, err
	}
	// The largest pipe the kernel gives (1 MiB by default, 64 KiB
	// without it): Claude exits as soon as it has handed its result line
	// to the pipe, and what the pipe could not take then is lost.
	growPipe(outW)
	cmd.Stdin = nil // /dev/null: Claude in -p mode can hang on an open stdin
	cmd.Stdout, cmd.Stderr = outW, errW
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return outR, errR, []*os.File{outW, errW}, nil
}

// stdinFile returns a read-only file holding b that exists nowhere on
// disk: a memfd, or else an unlinked temporary file. The agent reads it
// to its end like any stdin, and no goroutine has to feed a pipe.
func stdinFile(b []byte) (*os.File, error) {
	var f *os.File
	if fd, err := unix.MemfdCreate("agent-stdin", unix.MFD_CLOEXEC); err == nil {
		f = os.NewFile(uintptr(fd), "agent-stdin")
	} else if f, err = os.CreateTemp("", "agent-stdin-*"); err == nil {
		_ = os.Remove(f.Name())
	} else {
		return nil, fmt.Errorf("agent: stdin file: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return nil, fmt.Errorf("agent: stdin file: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("agent: stdin file: %w", err)
	}
	return f, nil
}

func looksLikeJSON(b []byte) bool {
	for _, c := range b {
		switch c {
		case ' ', '\t':
			continue
		case '{':
			return true
		}
		return false
	}
	return false
}

func waitTimeout(wg *sync.WaitGroup, d time.Duration, onTimeout func()) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		onTimeout()
		<-done
	}
}

// tail keeps the last n bytes written to it.
type tail struct {
	mu  sync.Mutex
	n   int
	buf []byte
}

func newTail(n int) *tail { return &tail{n: n} }

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*t.n {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.n:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.buf) > t.n {
		return string(t.buf[len(t.buf)-t.n:])
	}
	return string(t.buf)
}
