package testkit

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Proxy is a loopback TCP proxy in front of a Redis server that follows
// the RESP conversation of each connection, so that a test can break a
// connection at a chosen reply: a reply lost on the wire after Redis acted
// on the command (an XREADGROUP that delivered an entry the client never
// saw), or a connection reset right after a reply. Point a client at
// Proxy.Addr instead of the server's address.
type Proxy struct {
	Addr   string // 127.0.0.1:port, where clients connect
	Target string // the server's address

	ln net.Listener
	mu sync.Mutex
	// cut is asked about every reply (see SetCut); nil forwards everything.
	cut   func(Reply) Cut
	conns map[net.Conn]bool
	cuts  int
}

// Reply is one reply the server sent, with the command it answers.
type Reply struct {
	Command []string // the command's words as the client sent them ("XREADGROUP", "GROUP", ...)
	Null    bool     // the reply is a null (a blocking read that timed out, a missing key)
	Error   bool     // the reply is an error
}

// Name returns the command's name in upper case.
func (r Reply) Name() string {
	if len(r.Command) == 0 {
		return ""
	}
	return strings.ToUpper(r.Command[0])
}

// Cut says what the proxy does with a reply.
type Cut int

const (
	// Forward passes the reply on.
	Forward Cut = iota
	// DropReply closes both sides of the connection without passing the
	// reply on: the server did what the command asked, the client never
	// learns it.
	DropReply
	// CutAfterReply passes the reply on, then closes both sides.
	CutAfterReply
)

// StartProxy starts a proxy to target (a Redis server's host:port) on a
// free loopback port; it stops when the test ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testkit: proxy listen: %v", err)
	}
	p := &Proxy{Addr: ln.Addr().String(), Target: target, ln: ln, conns: map[net.Conn]bool{}}
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// URL returns a redis:// URL that reaches the server through the proxy.
func (p *Proxy) URL() string { return "redis://" + p.Addr + "/0" }

// SetCut sets what the proxy asks about every reply from now on (nil:
// forward everything). f runs on the connection's goroutine and must be
// quick.
func (p *Proxy) SetCut(f func(Reply) Cut) {
	p.mu.Lock()
	p.cut = f
	p.mu.Unlock()
}

// Cuts returns how many connections the proxy has broken so far.
func (p *Proxy) Cuts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cuts
}

// Close stops accepting and closes every connection.
func (p *Proxy) Close() {
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
}

func (p *Proxy) track(c net.Conn, on bool) {
	p.mu.Lock()
	if on {
		p.conns[c] = true
	} else {
		delete(p.conns, c)
	}
	p.mu.Unlock()
}

func (p *Proxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.Target)
		if err != nil {
			client.Close()
			continue
		}
		p.track(client, true)
		p.track(server, true)
		go p.serve(client, server)
	}
}

// serve copies one connection both ways. Commands are parsed on their way
// to the server and queued; each reply is matched with the oldest queued
// command (Redis answers in order), so the decision about a reply knows
// which command it answers.
func (p *Proxy) serve(client, server net.Conn) {
	var mu sync.Mutex
	var queue [][]string
	closeBoth := func() {
		client.Close()
		server.Close()
		p.track(client, false)
		p.track(server, false)
	}
	defer closeBoth()
	go func() {
		defer closeBoth()
		r := bufio.NewReader(client)
		for {
			raw, words, err := readCommand(r)
			if err != nil {
				return
			}
			mu.Lock()
			queue = append(queue, words)
			mu.Unlock()
			if _, err := server.Write(raw); err != nil {
				return
			}
		}
	}()
	r := bufio.NewReader(server)
	for {
		v, err := readValue(r)
		if err != nil {
			return
		}
		if v.push { // out of band: answers no command
			if _, err := client.Write(v.raw); err != nil {
				return
			}
			continue
		}
		mu.Lock()
		var cmd []string
		if len(queue) > 0 {
			cmd, queue = queue[0], queue[1:]
		}
		mu.Unlock()
		p.mu.Lock()
		f := p.cut
		p.mu.Unlock()
		what := Forward
		if f != nil {
			what = f(Reply{Command: cmd, Null: v.null, Error: v.err})
		}
		if what == DropReply {
			p.countCut()
			return
		}
		if _, err := client.Write(v.raw); err != nil {
			return
		}
		if what == CutAfterReply {
			p.countCut()
			return
		}
	}
}

func (p *Proxy) countCut() {
	p.mu.Lock()
	p.cuts++
	p.mu.Unlock()
}

// readCommand reads one command a client sent: a RESP array of bulk
// strings, or an inline command (one line of words).
func readCommand(r *bufio.Reader) (raw []byte, words []string, err error) {
	b, err := r.Peek(1)
	if err != nil {
		return nil, nil, err
	}
	if b[0] != '*' {
		line, err := readLine(r)
		if err != nil {
			return nil, nil, err
		}
		return line, strings.Fields(string(line)), nil
	}
	v, err := readValue(r)
	if err != nil {
		return nil, nil, err
	}
	return v.raw, v.words, nil
}

// value is one RESP value as read: its bytes, and what the proxy needs to
// know of it.
type value struct {
	raw   []byte
	null  bool
	err   bool
	push  bool
	words []string // the bulk strings of an array (a command's words)
}

var errProtocol = errors.New("testkit: proxy: malformed RESP")

// readValue reads one RESP2 or RESP3 value, with its attribute if any.
func readValue(r *bufio.Reader) (value, error) {
	var buf bytes.Buffer
	v, err := readInto(r, &buf, true)
	v.raw = buf.Bytes()
	return v, err
}

func readInto(r *bufio.Reader, buf *bytes.Buffer, top bool) (value, error) {
	var v value
	line, err := readLine(r)
	if err != nil {
		return v, err
	}
	buf.Write(line)
	if len(line) < 3 {
		return v, errProtocol
	}
	body := string(line[1 : len(line)-2])
	switch line[0] {
	case '+', ':', ',', '(', '#':
	case '-':
		v.err = true
	case '_':
		v.null = true
	case '$', '!', '=':
		n, err := strconv.Atoi(body)
		if err != nil {
			return v, errProtocol
		}
		if n < 0 {
			v.null = true
			break
		}
		data := make([]byte, n+2)
		if _, err := io.ReadFull(r, data); err != nil {
			return v, err
		}
		buf.Write(data)
		v.err = line[0] == '!'
		v.words = []string{string(data[:n])}
	case '*', '~', '>', '%', '|':
		n, err := strconv.Atoi(body)
		if err != nil {
			return v, errProtocol
		}
		if n < 0 {
			v.null = true
			break
		}
		if line[0] == '%' || line[0] == '|' {
			n *= 2
		}
		var words []string
		for i := 0; i < n; i++ {
			e, err := readInto(r, buf, false)
			if err != nil {
				return v, err
			}
			if len(e.words) == 1 {
				words = append(words, e.words[0])
			}
		}
		v.push = line[0] == '>'
		if line[0] == '*' {
			v.words = words
		}
		if line[0] == '|' && top {
			// An attribute precedes the value it describes.
			return readInto(r, buf, true)
		}
	default:
		return v, fmt.Errorf("%w: type byte %q", errProtocol, line[0])
	}
	return v, nil
}

func readLine(r *bufio.Reader) ([]byte, error) {
	line, err := r.ReadBytes('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return nil, errProtocol
	}
	return line, nil
}
