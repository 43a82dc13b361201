// Package egress is a sealed worker's way out: a loopback HTTP proxy the
// agent's HTTP_PROXY and HTTPS_PROXY point at, which hands every
// connection to the gateway's egress socket (the gateway decides, by the
// worker's allowlist, what may pass, and resolves the names). What the
// gateway refuses, through this front or on a socket the agent calls
// itself, the wrapper learns from the gateway's refusal log (Refusals),
// not from the answers that pass here: an agent need not come this way.
// A plain HTTP request is sent with Connection: close, so that every
// request of the agent gets its own connection.
package egress

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// maxHead bounds the request head the front reads from the agent.
const maxHead = 64 << 10

// Front is a running loopback proxy.
type Front struct {
	// URL is what the agent's HTTP_PROXY and HTTPS_PROXY are set to.
	URL string

	ln     net.Listener
	socket string
	log    *slog.Logger
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]bool
	closed bool
}

// Start listens on 127.0.0.1 (a free port) and relays to the gateway's
// egress socket.
func Start(socket string, log *slog.Logger) (*Front, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &Front{URL: "http://" + ln.Addr().String(), ln: ln, socket: socket, log: log, conns: map[net.Conn]bool{}}
	f.wg.Add(1)
	go f.accept()
	return f, nil
}

// Env is the agent's environment for the front: every spelling of the
// proxy variables the agents' tools read, and loopback left out of it
// (the model API proxy and the progress endpoint are there).
func (f *Front) Env() []string {
	const local = "127.0.0.1,localhost,::1"
	return []string{"HTTP_PROXY=" + f.URL, "HTTPS_PROXY=" + f.URL, "http_proxy=" + f.URL, "https_proxy=" + f.URL,
		"ALL_PROXY=" + f.URL, "all_proxy=" + f.URL, "NO_PROXY=" + local, "no_proxy=" + local}
}

// Close stops the front and cuts its connections.
func (f *Front) Close() error {
	f.mu.Lock()
	f.closed = true
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	err := f.ln.Close()
	f.wg.Wait()
	return err
}

func (f *Front) accept() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(50 * time.Millisecond) // out of descriptors: try again
			continue
		}
		if !f.track(c, true) {
			c.Close()
			return
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			defer f.track(c, false)
			defer func() {
				if r := recover(); r != nil {
					f.log.Error("egress: a connection's handling panicked", "panic", r)
				}
			}()
			f.serve(c)
		}()
	}
}

// track adds (or removes) an open connection; false once closed.
func (f *Front) track(c net.Conn, add bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !add {
		delete(f.conns, c)
		return true
	}
	if f.closed {
		return false
	}
	f.conns[c] = true
	return true
}

// serve hands one connection of the agent to the gateway.
func (f *Front) serve(agent net.Conn) {
	defer agent.Close()
	_ = agent.SetReadDeadline(time.Now().Add(30 * time.Second))
	limit := &headLimit{r: agent, n: maxHead}
	br := bufio.NewReaderSize(limit, 4096)
	req, err := http.ReadRequest(br)
	if err != nil {
		writeStatus(agent, http.StatusBadRequest, "egress: not an HTTP proxy request")
		return
	}
	limit.lift()
	_ = agent.SetReadDeadline(time.Time{})
	var d net.Dialer
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	gw, err := d.DialContext(ctx, "unix", f.socket)
	cancel()
	if err != nil {
		f.log.Warn("egress: the gateway does not answer", "err", err)
		writeStatus(agent, http.StatusBadGateway, "egress: the gateway does not answer")
		return
	}
	f.track(gw, true)
	defer f.track(gw, false)
	defer gw.Close()
	if req.Method != http.MethodConnect {
		req.Close = true // one request per connection: each answer is seen
	}
	if err := req.WriteProxy(gw); err != nil {
		return
	}
	gr := bufio.NewReader(gw)
	head, err := readHead(gr)
	if err != nil {
		return
	}
	if _, err := agent.Write(head); err != nil {
		return
	}
	splice(agent, br, gw, gr)
}

// readHead reads a response head (status line and headers, up to the blank
// line), bounded.
func readHead(r *bufio.Reader) ([]byte, error) {
	var head []byte
	for len(head) < maxHead {
		line, err := r.ReadSlice('\n')
		head = append(head, line...)
		if err != nil {
			return nil, err
		}
		if len(line) <= 2 && strings.TrimSpace(string(line)) == "" {
			return head, nil
		}
	}
	return nil, errors.New("egress: response head too long")
}

// splice copies both ways until either side is done, the readers' buffered
// bytes first.
func splice(agent net.Conn, ar *bufio.Reader, gw net.Conn, gr *bufio.Reader) {
	done := make(chan struct{}, 2)
	go func() {
		_, _ = io.Copy(gw, ar)
		if cw, ok := gw.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(agent, gr)
		if cw, ok := agent.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		done <- struct{}{}
	}()
	<-done
	<-done
}

// headLimit bounds what is read of a connection until lift: the request
// head, whatever its lines.
type headLimit struct {
	r    io.Reader
	mu   sync.Mutex
	n    int
	free bool
}

func (h *headLimit) Read(p []byte) (int, error) {
	h.mu.Lock()
	free, n := h.free, h.n
	h.mu.Unlock()
	if free {
		return h.r.Read(p)
	}
	if n <= 0 {
		return 0, errors.New("egress: request head too long")
	}
	if len(p) > n {
		p = p[:n]
	}
	k, err := h.r.Read(p)
	h.mu.Lock()
	h.n -= k
	h.mu.Unlock()
	return k, err
}

func (h *headLimit) lift() { h.mu.Lock(); h.free = true; h.mu.Unlock() }

func writeStatus(c net.Conn, status int, msg string) {
	body := msg + "\n"
	_, _ = c.Write([]byte("HTTP/1.1 " + strconv.Itoa(status) + " " + http.StatusText(status) + "\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\nConnection: close\r\n\r\n" + body))
}
