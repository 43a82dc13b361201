package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
)

// RESP2, as little of it as the gateway speaks to the sentinels.

// replyError is an error reply of the server.
type replyError string

func (e replyError) Error() string { return "redis: " + string(e) }

// respConn is a connection speaking RESP2: commands out as arrays of bulk
// strings, replies in flattened to strings.
type respConn struct {
	net.Conn
	r    *bufio.Reader
	stop func() bool // ends the watch of the context that closes it
}

// newRespConn speaks RESP on nc, closed when ctx is done: a read or
// write waiting on it then fails at once.
func newRespConn(ctx context.Context, nc net.Conn) *respConn {
	return &respConn{Conn: nc, r: bufio.NewReader(nc), stop: context.AfterFunc(ctx, func() { nc.Close() })}
}

func (c *respConn) Close() error {
	c.stop()
	return c.Conn.Close()
}

func (c *respConn) send(words ...string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(words))
	for _, w := range words {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(w), w)
	}
	_, err := io.WriteString(c.Conn, b.String())
	return err
}

// maxReply bounds what one reply may hold: a sentinel's answers are a few
// short strings.
const maxReply = 64 << 10

// read reads one reply: a string or integer as one element, an array's
// elements (nested arrays flattened), a nil as "". An error reply is an
// error.
func (c *respConn) read() ([]string, error) {
	var out []string
	err := c.readInto(&out, 0)
	return out, err
}

func (c *respConn) readInto(out *[]string, depth int) error {
	if depth > 4 {
		return errors.New("redis reply nested too deep")
	}
	line, err := c.r.ReadString('\n')
	if err != nil {
		return err
	}
	line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
	if line == "" {
		return errors.New("empty redis reply")
	}
	switch line[0] {
	case '+', ':':
		*out = append(*out, line[1:])
		return nil
	case '-':
		return replyError(printable(line[1:]))
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n > maxReply {
			return fmt.Errorf("redis reply %q not understood", printable(line))
		}
		if n < 0 {
			*out = append(*out, "")
			return nil
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(c.r, b); err != nil {
			return err
		}
		*out = append(*out, string(b[:n]))
		return nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n > 64 {
			return fmt.Errorf("redis reply %q not understood", printable(line))
		}
		for range max(n, 0) {
			if err := c.readInto(out, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("redis reply %q not understood", printable(line))
}
