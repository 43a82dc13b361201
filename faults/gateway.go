package faults

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentvisor/agentvisor/gateway"
	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/testkit"
)

// The suite's workers are sealed (WORKER_NETWORK_MODE=sealed, the
// managers' default): their containers have no network, and their
// wrappers reach Redis through the unix sockets of a worker-gateway
// process, one per host, as in production. A case on one host has one
// gateway (Case.StartGateway); each simulated host of a fleet has its own
// (Host.StartManager).

// GatewayBin is where the suite builds the worker-gateway.
func GatewayBin() string { return filepath.Join(testkit.Root(), "bin", "worker-gateway") }

// GatewayReady is how long a gateway may take to answer on its control
// socket after its start.
const GatewayReady = 10 * time.Second

// A Gateway is one worker-gateway process serving Dir (its GATEWAY_DIR),
// relaying every worker's redis.sock to Upstream (GATEWAY_REDIS: one
// server's host:port, or a sentinel URL without the data user's
// credentials). No
// GATEWAY_MODEL: the fake agent calls no model, and the wrapper dials
// model.sock only when a call comes.
type Gateway struct {
	Dir      string
	Upstream string
	*process
}

// startGateway starts bin/worker-gateway on dir, relaying to upstream
// (host:port), its log under logDir, and waits until its control socket
// answers: by then it serves again every worker directory it finds in
// dir (a start after a crash).
func startGateway(dir, logDir, upstream string) (*Gateway, error) {
	env := map[string]string{"GATEWAY_DIR": dir, "GATEWAY_REDIS": upstream, "LOG_LEVEL": "debug"}
	log := filepath.Join(logDir, fmt.Sprintf("gateway-%d.log", time.Now().UnixNano()))
	p, err := startProcess(GatewayBin(), log, env)
	if err != nil {
		return nil, fmt.Errorf("start worker-gateway on %s: %w", dir, err)
	}
	g := &Gateway{Dir: dir, Upstream: upstream, process: p}
	c := gateway.NewClient(dir)
	ready := testkit.Poll(GatewayReady, 20*time.Millisecond, func() bool {
		if !g.Running() {
			return true
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := c.Workers(ctx)
		return err == nil
	})
	if !g.Running() {
		return nil, fmt.Errorf("worker-gateway on %s exited at start; its log:\n%s", dir, g.LogTail(20))
	}
	if !ready {
		g.Kill()
		return nil, fmt.Errorf("worker-gateway on %s did not answer on its control socket within %s; its log:\n%s", dir, GatewayReady, g.LogTail(20))
	}
	return g, nil
}

// Restart starts the gateway again on its directory and upstream, as a
// supervisor restarts a crashed one: the sockets of the workers it served
// are made anew at the same paths (the containers' mounts keep working).
// The old process must have exited.
func (g *Gateway) Restart() (*Gateway, error) {
	if g.Running() {
		return nil, fmt.Errorf("worker-gateway on %s runs still", g.Dir)
	}
	return startGateway(g.Dir, filepath.Dir(g.Log), g.Upstream)
}

// Workers returns the workers the gateway serves.
func (g *Gateway) Workers() ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return gateway.NewClient(g.Dir).Workers(ctx)
}

// gatewayDir makes a short directory for a gateway: a unix socket's path
// is at most 107 bytes, and a worker's is GATEWAY_DIR/{id}/redis.sock.
func gatewayDir() (string, error) {
	dir, err := os.MkdirTemp("", "gw")
	if err != nil {
		return "", err
	}
	if err := checkSocketRoom(dir); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// checkSocketRoom fails when a gateway on dir would make socket paths
// longer than a unix socket's path may be (107 bytes; the gateway makes
// room for a worker id of 64 characters, and refuses to start without).
func checkSocketRoom(dir string) error {
	if n := len(filepath.Join(dir, strings.Repeat("x", 64), gateway.EgressSocket)); n > 107 {
		return fmt.Errorf("faults: gateway directory %s makes socket paths of %d bytes (at most 107): set a shorter TMPDIR", dir, n)
	}
	return nil
}

// upstreamOf is GATEWAY_REDIS for the workers of a Redis URL: the
// host:port of a redis:// URL's server; for a sentinel URL, the URL
// without the data user's credentials (the gateway follows the primary
// the sentinels name, and never holds a password but the sentinels').
func upstreamOf(redisURL string) (string, error) {
	u, err := protocol.ParseRedisURL(redisURL)
	if err != nil {
		return "", err
	}
	if u.Sentinel {
		u.Username, u.Password = "", ""
		return u.String(), nil
	}
	if len(u.Addrs) != 1 {
		return "", fmt.Errorf("faults: redis URL %s names no server", protocol.RedactRedisURL(redisURL))
	}
	if _, _, err := net.SplitHostPort(u.Addrs[0]); err != nil {
		return "", fmt.Errorf("faults: redis URL %s: %w", protocol.RedactRedisURL(redisURL), err)
	}
	return u.Addrs[0], nil
}

// Gateway returns the case's worker-gateway (nil before one started).
func (c *Case) Gateway() *Gateway {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gateway
}

// StartGateway starts the case's worker-gateway on a new short directory,
// relaying the workers' redis.sock to upstream (GATEWAY_REDIS): a case whose
// workers reach Redis another way (a proxy) calls it before its first
// manager. It is stopped (SIGTERM) when the case has ended, after the
// final shutdown of the managers (their workers need Redis until they
// stop), and its directory removed.
func (c *Case) StartGateway(upstream string) *Gateway {
	c.T.Helper()
	if c.Gateway() != nil {
		c.T.Fatal("faults: the case's gateway was started already")
	}
	dir, err := gatewayDir()
	if err != nil {
		c.T.Fatal(err)
	}
	g, err := startGateway(dir, c.T.TempDir(), upstream)
	if err != nil {
		os.RemoveAll(dir)
		c.T.Fatal(err)
	}
	c.mu.Lock()
	c.gateway = g
	c.mu.Unlock()
	c.AfterFinish(func() {
		if g := c.Gateway(); g.Running() {
			if exited, took := g.terminate(10 * time.Second); !exited {
				c.T.Errorf("worker-gateway did not exit within %s of SIGTERM; its log:\n%s", roundDur(took), g.LogTail(20))
			}
		}
		_ = os.RemoveAll(dir)
	})
	shown := upstream // host:port, or a sentinel URL with the sentinels' password
	if strings.Contains(upstream, "://") {
		shown = protocol.RedactRedisURL(upstream)
	}
	c.T.Logf("worker-gateway (pid %d) on %s, relaying to %s", g.Pid(), dir, shown)
	return g
}

// RestartGateway starts the case's gateway again on its directory, as a
// supervisor restarts a crashed one (its process must have exited).
func (c *Case) RestartGateway() *Gateway {
	c.T.Helper()
	g, err := c.restartGateway()
	if err != nil {
		c.T.Fatal(err)
	}
	return g
}

func (c *Case) restartGateway() (*Gateway, error) {
	g, err := c.Gateway().Restart()
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.gateway = g
	c.mu.Unlock()
	return g, nil
}
