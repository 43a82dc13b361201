package agent

import (
	"errors"
	"io"
	"time"
)

// endReason is why a supervisor stopped watching its process.
type endReason int

const (
	endExited      endReason = iota // the process exited (a whole run: and its output was read)
	endTurn                         // the turn's result came
	endClosed                       // the output ended while the process's exit was not yet seen
	endTimedOut                     // the timeout passed
	endCancelled                    // the context ended
	endStalled                      // no output for the stall timeout
	endInterrupted                  // interrupted: stopped without a result in time, or right after it
	endAborted                      // Spec.Check refused an event
)

// supervisor watches one agent process: it reads its events into an
// Outcome, stops the process when it stalls, times out, is cancelled, is
// refused by Spec.Check or was interrupted, and reads what is left of its
// output after it exited.
//
// A whole run (Run) lasts until the process exited and its output ended:
// stopping it means SIGTERM, then SIGKILL after KillGrace, and the wait
// goes on. A turn (Persistent) lasts until the turn's result, and the
// first reason to stop the process stops it (terminate waits for its
// exit) and ends the supervision.
type supervisor struct {
	out   *Outcome
	start time.Time
	spec  *Spec // Check, StallTimeout, StallExempt and the graces
	whole bool

	events    <-chan []Event // closed at the end of the output
	exits     <-chan ExitStatus
	done      <-chan struct{}  // the context's
	deadline  <-chan time.Time // the timeout; nil: none
	interrupt <-chan struct{}
	// interruptGrace is how long an interrupted process has to answer.
	interruptGrace time.Duration
	onEvent        func(Event)

	// What the process is, passed by Run or Persistent.
	terminate       func()           // stops the process
	kill            func()           // SIGKILL to its group
	signalInterrupt func()           // asks it to end its turn
	see             func(Event)      // takes each event after the Outcome recorded it; may be nil
	turnEnds        func(Event) bool // whether an event, passed to onEvent, ends the turn
	onExit          func(ExitStatus) // told the exit status; may be nil
	outputRead      func() int64     // bytes of output read so far (a whole run)
	closeOutput     func()           // stops the reading of the output (a whole run)

	ended, exited, outputDone bool
	turnOver                  bool // an event ended the turn
	reason                    endReason
	stallTimer                *time.Timer
	stall                     <-chan time.Time
	// Timers armed by what happened, nil while not: the end of the
	// interrupt's grace, of the result's, of the drain's, of the hard
	// drain's, and of the time between SIGTERM and SIGKILL.
	interruptDue, resultDue, drainDue, hardDrainDue, killDue <-chan time.Time
	// drained is the output read when the hard drain was last armed.
	drained int64
}

// run supervises until the process's end (a whole run) or its turn's,
// and says why it ended.
func (s *supervisor) run() endReason {
	if s.spec.StallTimeout > 0 {
		s.stallTimer = time.NewTimer(s.spec.StallTimeout)
		defer s.stallTimer.Stop()
		s.stall = s.stallTimer.C
	}
	for !s.ended && !(s.exited && s.outputDone) {
		s.step()
	}
	return s.reason
}

// step waits for the next thing that happens and reacts to it.
func (s *supervisor) step() {
	select {
	case evs, ok := <-s.events:
		if !ok {
			s.outputEnded()
			return
		}
		s.take(evs)
	case st := <-s.exits:
		s.exit(st)
	case <-s.deadline:
		s.timedOut()
	case <-s.done:
		s.cancelled()
	case <-s.stall:
		s.stalled()
	case <-s.interrupt:
		s.interrupted()
	case <-s.interruptDue:
		s.interruptDue = nil
		if !s.exited && s.killDue == nil {
			s.stop(endInterrupted)
		}
	case <-s.resultDue:
		s.resultDue = nil
		if !s.exited {
			s.out.KilledAfterResult = true
			s.kill()
		}
	case <-s.drainDue:
		s.drainPassed()
	case <-s.hardDrainDue:
		s.hardDrainPassed()
	case <-s.killDue:
		s.killDue = nil
		s.kill()
	}
}

// finish ends the supervision for r.
func (s *supervisor) finish(r endReason) {
	s.ended, s.reason = true, r
}

// stop ends the process for r: in a turn, at once and the supervision
// with it; in a whole run, SIGTERM now and SIGKILL after KillGrace, the
// first reason being the one run gives.
func (s *supervisor) stop(r endReason) {
	s.terminate()
	if !s.whole {
		s.finish(r)
		return
	}
	if s.reason == endExited {
		s.reason = r
	}
	s.killDue = time.After(s.spec.KillGrace)
}

// take handles a batch of events (one output line's); any is activity
// for the stall timeout.
func (s *supervisor) take(evs []Event) {
	if s.stallTimer != nil {
		s.stallTimer.Reset(s.spec.StallTimeout)
	}
	for _, ev := range evs {
		s.handle(ev)
		if s.ended {
			return
		}
	}
}

// handle records one event, checks it, hands it on, and sees whether it
// ends the turn.
func (s *supervisor) handle(ev Event) {
	s.out.record(ev, time.Since(s.start))
	if s.see != nil {
		s.see(ev)
	}
	if s.out.check(s.spec.Check, ev) && !s.exited {
		s.stop(endAborted)
		if s.ended {
			return
		}
	}
	if s.onEvent != nil {
		s.onEvent(ev)
	}
	if s.turnEnds(ev) {
		s.turnEnded()
	}
}

// turnEnded: a turn ends the supervision of a turn; a whole run gives the
// process ResultGrace to exit.
func (s *supervisor) turnEnded() {
	s.turnOver = true
	if !s.whole {
		s.finish(endTurn)
		return
	}
	if s.exited {
		return
	}
	if s.out.Interrupted && s.killDue == nil {
		// Interrupted, it has saved its turn: no need to wait for its own
		// slow exit.
		s.stop(endInterrupted)
	}
	if s.resultDue == nil {
		s.resultDue = time.After(s.spec.ResultGrace)
	}
}

// outputEnded: in a whole run the wait for the exit goes on; a turn ends.
func (s *supervisor) outputEnded() {
	s.events, s.outputDone = nil, true
	if !s.whole {
		s.finish(endClosed)
	}
}

// exit: a whole run reads on, for DrainGrace before it kills what holds
// the output; a turn ends once it read what the process printed before.
func (s *supervisor) exit(st ExitStatus) {
	s.exited, s.exits, s.out.Exit = true, nil, st
	if s.onExit != nil {
		s.onExit(st)
	}
	if !s.whole {
		s.drainTurn()
		s.finish(endExited)
		return
	}
	if !s.outputDone {
		s.drainDue = time.After(s.spec.DrainGrace)
	}
}

// drainTurn records the events a process that died during a turn printed
// before, until its output ends; after DrainGrace a child holds it: kill
// the group and read no more.
func (s *supervisor) drainTurn() {
	if !readToEnd(s.events, s.spec.DrainGrace, func(ev Event) { s.out.record(ev, time.Since(s.start)) }) {
		s.kill()
	}
}

// readToEnd passes each event of events to see until events closes
// (true) or grace passed first (false).
func readToEnd(events <-chan []Event, grace time.Duration, see func(Event)) bool {
	timeout := time.After(grace)
	for {
		select {
		case evs, ok := <-events:
			if !ok {
				return true
			}
			for _, ev := range evs {
				see(ev)
			}
		case <-timeout:
			return false
		}
	}
}

// timedOut stops a process whose turn is not over, unless Check already
// stopped it.
func (s *supervisor) timedOut() {
	s.deadline = nil
	if !s.turnOver && s.out.Aborted == nil {
		s.out.TimedOut = true
		s.stop(endTimedOut)
	}
}

// cancelled stops a process whose turn is not over, unless the timeout or
// Check already stopped it.
func (s *supervisor) cancelled() {
	s.done = nil
	if !s.turnOver && !s.out.TimedOut && s.out.Aborted == nil {
		s.out.Cancelled = true
		s.stop(endCancelled)
	}
}

// stalled stops a process silent for the stall timeout, unless its
// silence is exempt or it is already being stopped.
func (s *supervisor) stalled() {
	if s.spec.StallExempt != nil && s.spec.StallExempt() {
		s.stallTimer.Reset(s.spec.StallTimeout)
		return
	}
	s.stall = nil
	if !s.turnOver && !s.exited && s.killDue == nil {
		s.out.Stalled = true
		s.stop(endStalled)
	}
}

// interrupted asks a process whose turn is not over to end it, and gives
// it interruptGrace to answer.
func (s *supervisor) interrupted() {
	s.interrupt = nil
	if s.turnOver || s.out.TimedOut || s.out.Cancelled {
		return
	}
	s.out.Interrupted = true
	s.signalInterrupt()
	s.interruptDue = time.After(s.interruptGrace)
}

// drainPassed: a child of the group holds the output after the exit: kill
// the group. Its pipe then ends once read, however long the parsing of
// what is in it takes.
func (s *supervisor) drainPassed() {
	s.drainDue = nil
	s.out.KilledDraining = true
	s.kill()
	s.hardDrainDue, s.drained = time.After(hardDrainGrace), s.outputRead()
}

// hardDrainPassed stops reading the output when none came since the
// hard drain was armed.
func (s *supervisor) hardDrainPassed() {
	if n := s.outputRead(); n != s.drained {
		// Still reading what the agent wrote (a result line of many
		// megabytes): not a pipe held open by a stray process.
		s.hardDrainDue, s.drained = time.After(hardDrainGrace), n
		return
	}
	// A process outside the group (it called setsid) still holds the
	// pipe: stop reading.
	s.hardDrainDue = nil
	s.closeOutput()
}

// deadline returns a channel that fires once d passed (nil, which never
// fires, when d <= 0) and the function that releases its timer.
func deadline(d time.Duration) (<-chan time.Time, func()) {
	if d <= 0 {
		return nil, func() {}
	}
	t := time.NewTimer(d)
	return t.C, func() { t.Stop() }
}

// eventReader parses a process's output into events, line by line.
type eventReader struct {
	parser  Parser
	maxLine int
	// pty, when set, is stderr's tail of output read from a terminal: its
	// lines are cleaned of escape sequences, and those that are not JSON
	// go here too.
	pty         *tail
	lines, long int // lines read, and lines skipped as over maxLine
}

// read sends the events of src's lines to events until src ends, then
// closes events.
func (r *eventReader) read(src io.Reader, events chan<- []Event) {
	defer close(events)
	lr := NewLineReader(src, r.maxLine)
	for {
		line, err := lr.Next()
		if errors.Is(err, ErrLineTooLong) {
			r.long++
			continue
		}
		if err != nil {
			return // EOF, or EIO from a pty whose other side closed
		}
		r.lines++
		if r.pty != nil {
			line = CleanTerminalLine(line)
			if !looksLikeJSON(line) {
				r.pty.Write(append(line, '\n'))
			}
		}
		if evs := r.parser.ParseLine(line); len(evs) > 0 {
			events <- evs
		}
	}
}
