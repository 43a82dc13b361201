package gateway

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/testkit"
)

// readRefusals reads the refusal log of the worker behind egress sock,
// as its wrapper does, with token; it returns the status and the page.
func readRefusals(t *testing.T, sock, token string, after uint64, epoch string) (int, RefusalPage) {
	t.Helper()
	hc := modelClient(sock)
	defer hc.CloseIdleConnections()
	hc.Timeout = 40 * time.Second
	q := url.Values{"after": {fmt.Sprint(after)}, "epoch": {epoch}}
	req, _ := http.NewRequest(http.MethodGet, "http://gateway"+RefusalsPath+"?"+q.Encode(), nil)
	// An origin-form request, as an HTTP client speaks to a server (not
	// to a proxy).
	if token != "" {
		req.Header.Set(ModelTokenHeader, token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p RefusalPage
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
			t.Fatal(err)
		}
	}
	return resp.StatusCode, p
}

// Every refusal the gateway makes a worker, on every socket, reaches the
// worker's refusal log, which its wrapper alone reads (with the worker's
// token) and publishes: a CONNECT off the allowlist, a model call without
// the token, a read of the log without it, a connection over MaxConns.
// A read waiting on the log is woken by the next refusal.
func TestEveryRefusalReachesTheRefusalLog(t *testing.T) {
	model, seen := startTLSModel(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "model answer") })
	r := testkit.StartRedis(t)
	dir := shortDir(t)
	_, ctl := startGatewayWith(t, Config{Dir: dir, Redis: r.Addr, Model: model.Listener.Addr().String(), MaxConns: 4,
		UpstreamTLS: &tls.Config{RootCAs: rootsOf(model)}})
	if _, err := ctl.OpenSpec(context.Background(), WorkerSpec{WorkerID: "w", ModelToken: workerToken}); err != nil {
		t.Fatal(err)
	}
	egress := sockOf(dir, "w", EgressSocket)
	status, first := readRefusals(t, egress, workerToken, 0, "")
	if status != http.StatusOK || len(first.Refusals) != 0 || first.Epoch == "" {
		t.Fatalf("a new worker's log: %d %+v", status, first)
	}

	// A read that waits, woken by the refusal that follows.
	woken := make(chan RefusalPage, 1)
	go func() { _, p := readRefusals(t, egress, workerToken, first.Next, first.Epoch); woken <- p }()
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	if resp, _, _ := connect(t, egress, "10.255.255.1:80"); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a CONNECT off the allowlist: %s", resp.Status)
	}
	select {
	case p := <-woken:
		if len(p.Refusals) != 1 || p.Refusals[0].Host != "10.255.255.1" {
			t.Fatalf("the waiting read got %+v", p)
		}
		t.Logf("a waiting read had the refusal %v after it was made", time.Since(start))
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting read was not woken by the refusal")
	}

	// The agent's own calls, straight to the sockets.
	mc := modelClient(sockOf(dir, "w", ModelSocket))
	if st, _ := modelPost(t, mc, map[string]string{"X-Api-Key": "sk-ant-own"}); st != http.StatusForbidden {
		t.Fatalf("model.sock without the token: %d", st)
	}
	mc.CloseIdleConnections()
	if st, _ := readRefusals(t, egress, "", 0, ""); st != http.StatusForbidden {
		t.Fatalf("the refusal log without the token: %d, want 403", st)
	}
	if st, _ := readRefusals(t, egress, workerToken+"x", 0, ""); st != http.StatusForbidden {
		t.Fatalf("the refusal log with a wrong token: %d, want 403", st)
	}
	// Connections held until one is refused (the CONNECT's is still
	// open, and the clients' close as the gateway sees it).
	var held []net.Conn
	for len(held) < 10 {
		c, err := net.Dial("unix", sockOf(dir, "w", RedisSocket))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		time.Sleep(20 * time.Millisecond)
		if st, _ := ctl.Stats(context.Background()); st["w"].Refused > 0 {
			break
		}
	}
	for _, c := range held {
		c.Close()
	}
	testkit.Eventually(t, "the held connections closed", 5*time.Second, func() bool {
		st, _ := ctl.Stats(context.Background())
		return st["w"].Open <= 1
	})

	status, p := readRefusals(t, egress, workerToken, 0, first.Epoch)
	if status != http.StatusOK {
		t.Fatalf("reading the log: %d", status)
	}
	want := []struct{ socket, tool, code string }{
		{EgressSocket, protocol.RefusedToolNetwork, protocol.RefusedEgress},
		{ModelSocket, protocol.RefusedToolModel, protocol.RefusedModelToken},
		{EgressSocket, protocol.RefusedToolNetwork, protocol.RefusedModelToken},
		{EgressSocket, protocol.RefusedToolNetwork, protocol.RefusedModelToken},
		{RedisSocket, protocol.RefusedToolConnections, protocol.RefusedConnectionCap},
	}
	if len(p.Refusals) < len(want) {
		t.Fatalf("the log holds %d refusals, want %d: %+v", len(p.Refusals), len(want), p.Refusals)
	}
	for i, w := range want {
		got := p.Refusals[i]
		if got.Socket != w.socket || got.Tool != w.tool || got.Code != w.code || got.Reason == "" || got.Seq != uint64(i+1) {
			t.Errorf("refusal %d: %+v, want %s on %s (%s)", i, got, w.code, w.socket, w.tool)
		}
	}
	if p.Refusals[0].Request != "CONNECT 10.255.255.1:80" || p.Refusals[0].Port != 80 {
		t.Errorf("the egress refusal: %+v", p.Refusals[0])
	}
	if len(seen()) != 0 {
		t.Errorf("the model saw a refused call")
	}
}

// The log keeps the newest maxRefusalsKept and counts the ones it
// dropped; a read with another epoch (a gateway restarted) reads from the
// beginning.
func TestRefusalLogBounds(t *testing.T) {
	l := newRefusalLog()
	for i := range maxRefusalsKept + 10 {
		l.add(Refusal{Tool: protocol.RefusedToolNetwork, Code: protocol.RefusedEgress, Port: i})
	}
	p, _ := l.page(0, l.epoch)
	if len(p.Refusals) != maxRefusalsKept || p.Dropped != 10 || p.Next != maxRefusalsKept+10 || p.Refusals[0].Seq != 11 {
		t.Fatalf("page: %d kept, %d dropped, next %d, first seq %d", len(p.Refusals), p.Dropped, p.Next, p.Refusals[0].Seq)
	}
	if p, _ := l.page(p.Next, l.epoch); len(p.Refusals) != 0 || p.Dropped != 0 {
		t.Fatalf("past the newest: %+v", p)
	}
	if p, _ := l.page(5, "another"); len(p.Refusals) != maxRefusalsKept || p.Epoch != l.epoch {
		t.Fatalf("another epoch: %d refusals, epoch %q", len(p.Refusals), p.Epoch)
	}
	start := time.Now()
	if p := l.wait(context.Background(), maxRefusalsKept+10, l.epoch, 100*time.Millisecond); len(p.Refusals) != 0 || time.Since(start) < 100*time.Millisecond {
		t.Fatalf("a wait with nothing new: %+v after %v", p, time.Since(start))
	}
}
