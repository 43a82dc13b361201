package egress

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/gateway"
	"github.com/agentvisor/agentvisor/gateway/gatewaytest"
	"github.com/agentvisor/agentvisor/protocol"
)

const workerToken = "agentvisor-worker-token-refusals-1f2e"

// What the agent tries straight on its sockets, past the front (a CONNECT
// off the allowlist to egress.sock, a model call without the token to
// model.sock, a read of the refusal log without the token), reaches the
// wrapper from the real gateway's refusal log, each refusal once, with
// its code; a gateway restarted (a new log) is read from its beginning.
func TestRefusalsMadeOffTheFrontReachTheWrapper(t *testing.T) {
	dir := gatewaytest.Dir(t)
	cfg := gateway.Config{Dir: dir, Redis: "127.0.0.1:1", Model: "http://127.0.0.1:1"}
	g := gatewaytest.Start(t, cfg)
	info, err := gateway.NewClient(dir).OpenSpec(context.Background(), gateway.WorkerSpec{WorkerID: "w", ModelToken: workerToken})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []gateway.Refusal
	w := WatchRefusals(info.EgressSocket, workerToken, func(p gateway.RefusalPage) {
		mu.Lock()
		got = append(got, p.Refusals...)
		mu.Unlock()
	}, nil)
	defer w.Stop()
	waitFor := func(n int) []gateway.Refusal {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			mu.Lock()
			c := append([]gateway.Refusal(nil), got...)
			mu.Unlock()
			if len(c) >= n || time.Now().After(deadline) {
				return c
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	raw := func(sock, req string) string {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprint(c, req)
		b := make([]byte, 512)
		n, _ := c.Read(b)
		return string(b[:n])
	}
	for _, probe := range []struct{ sock, req string }{
		{info.EgressSocket, "CONNECT evil.example:443 HTTP/1.1\r\nHost: evil.example:443\r\n\r\n"},
		{info.ModelSocket, "POST /v1/messages HTTP/1.1\r\nHost: api.anthropic.com\r\nx-api-key: sk-own\r\nContent-Length: 0\r\n\r\n"},
		{info.EgressSocket, "GET " + gateway.RefusalsPath + " HTTP/1.1\r\nHost: gateway\r\n\r\n"},
	} {
		if a := raw(probe.sock, probe.req); !strings.HasPrefix(a, "HTTP/1.1 403") {
			t.Fatalf("%q: answered %q, want 403", probe.req, a)
		}
	}
	rs := waitFor(3)
	if len(rs) != 3 {
		t.Fatalf("the wrapper saw %d refusals, want 3: %+v", len(rs), rs)
	}
	for i, want := range []struct{ tool, code string }{
		{protocol.RefusedToolNetwork, protocol.RefusedEgress},
		{protocol.RefusedToolModel, protocol.RefusedModelToken},
		{protocol.RefusedToolNetwork, protocol.RefusedModelToken},
	} {
		if rs[i].Tool != want.tool || rs[i].Code != want.code {
			t.Errorf("refusal %d: %+v, want %s %s", i, rs[i], want.tool, want.code)
		}
	}
	if rs[0].Host != "evil.example" || rs[0].Port != 443 {
		t.Errorf("the egress refusal: %+v", rs[0])
	}

	// A restarted gateway: a new log, read from its start.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	gatewaytest.Start(t, cfg)
	time.Sleep(200 * time.Millisecond)
	if a := raw(info.EgressSocket, "CONNECT again.example:443 HTTP/1.1\r\nHost: again.example:443\r\n\r\n"); !strings.HasPrefix(a, "HTTP/1.1 403") {
		t.Fatalf("after the restart: %q", a)
	}
	if rs := waitFor(4); len(rs) != 4 || rs[3].Host != "again.example" {
		t.Fatalf("after the gateway's restart: %+v", rs)
	}
	time.Sleep(500 * time.Millisecond)
	mu.Lock()
	rs = append([]gateway.Refusal(nil), got...)
	mu.Unlock()
	if len(rs) != 4 {
		t.Fatalf("a refusal seen twice: %+v", rs)
	}
}
