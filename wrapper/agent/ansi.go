package agent

import "regexp"

// ansiRe matches the escape sequences a terminal program writes: CSI
// sequences (colours, cursor moves), OSC sequences (titles, links) ended by
// BEL or ST, and two-byte escapes.
var ansiRe = regexp.MustCompile(`\x1b\[[0-9;?<=>!]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]`)

// CleanTerminalLine removes ANSI escape sequences and carriage returns from
// a line read from a pty, so that a JSON line an agent printed to a
// terminal parses as if it came through a pipe.
func CleanTerminalLine(b []byte) []byte {
	if len(b) == 0 {
		return b
	}
	out := ansiRe.ReplaceAll(b, nil)
	// A pty turns "\n" into "\r\n"; a lone "\r" rewrites the line (a
	// progress bar): keep what follows the last one.
	for i := len(out) - 1; i >= 0; i-- {
		if out[i] == '\r' {
			if i == len(out)-1 {
				out = out[:i]
				continue
			}
			out = out[i+1:]
			break
		}
	}
	return out
}
