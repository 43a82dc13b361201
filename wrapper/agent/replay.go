package agent

import (
	"errors"
	"io"
)

// Replay reads an agent's output from r, line by line as a run reads it,
// and returns the Outcome its events make (no process, no exit status):
// what the wrapper would decide from that output. Lines longer than
// DefaultMaxLine are skipped, as in a run.
func Replay(r io.Reader, p Parser) (Outcome, error) {
	var o Outcome
	lr := NewLineReader(r, 0)
	for {
		line, err := lr.Next()
		switch {
		case errors.Is(err, io.EOF):
			return o, nil
		case errors.Is(err, ErrLineTooLong):
			continue
		case err != nil:
			return o, err
		}
		for _, ev := range p.ParseLine(line) {
			o.record(ev, 0)
		}
	}
}
