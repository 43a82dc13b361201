package agent

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// DefaultMaxLine bounds one line of agent output. A single line of 50 MB
// (a tool result that printed a large file) must parse; a runaway line
// larger than this is skipped, not buffered without end.
const DefaultMaxLine = 128 << 20

// LineReader reads newline-terminated lines of any length up to a bound,
// unlike bufio.Scanner's default 64 KB limit.
type LineReader struct {
	r   *bufio.Reader
	max int
	buf []byte
}

// ErrLineTooLong is returned (once per such line) for a line longer than the
// bound; the line is discarded and reading can go on.
var ErrLineTooLong = errors.New("agent: output line longer than the limit")

// NewLineReader reads lines of at most max bytes from r (max <= 0 means
// DefaultMaxLine).
func NewLineReader(r io.Reader, max int) *LineReader {
	if max <= 0 {
		max = DefaultMaxLine
	}
	return &LineReader{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

// Next returns the next line without its line ending ("\n" or "\r\n"). The
// slice is valid until the next call. At the end it returns io.EOF; a last
// line without a newline is returned first.
func (l *LineReader) Next() ([]byte, error) {
	l.buf = l.buf[:0]
	tooLong := false
	for {
		frag, err := l.r.ReadSlice('\n')
		if !tooLong {
			if len(l.buf)+len(frag) > l.max+2 { // +2: the line ending
				tooLong = true
				l.buf = l.buf[:0]
			} else {
				l.buf = append(l.buf, frag...)
			}
		}
		switch {
		case err == nil:
			if tooLong {
				return nil, ErrLineTooLong
			}
			return trimEOL(l.buf), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			if tooLong {
				return nil, ErrLineTooLong
			}
			if len(l.buf) > 0 {
				return trimEOL(l.buf), nil
			}
			return nil, io.EOF
		default:
			return nil, err
		}
	}
}

func trimEOL(b []byte) []byte {
	b = bytes.TrimSuffix(b, []byte("\n"))
	return bytes.TrimSuffix(b, []byte("\r"))
}
