// Package gateway owns the data plane of sealed workers on one host: the
// unix sockets through which a sealed worker's container, which has no
// network of its own, reaches Redis, the model API and the hosts its
// allowlist names, and the credentials it is never given. It runs as a
// process of its own beside the Docker engine (cmd/worker-gateway), so
// that the worker manager's restarts do not cut the workers'
// connections; the manager opens and closes workers through Client.
//
// Layout under Config.Dir:
//
//	control.sock        0600  the control API (HTTP): root only, never mounted
//	{id}/               0755  one directory per worker, mounted into its container
//	{id}/worker.json    0600  what the gateway was told (id, allow, project, token): read back at start
//	{id}/redis.sock     0600  relayed to Config.Redis over TCP
//	{id}/model.sock     0600  HTTP, forwarded to Config.Model over HTTPS with the worker's token (absent when Model is "")
//	{id}/egress.sock    0600  an HTTP forward proxy (CONNECT and http://) to what the worker's allowlist names
//
// Each worker has its own directory, so the gateway knows who calls from
// the socket it was called on. The container's uid (Config.WorkerUID)
// connects, so the worker sockets are its own, 0600: no other user of the
// host can connect; the directory is root's, so nothing in the container
// can replace them.
//
// One worker's request, end to end: the registry (registry.go) opened the
// worker (worker.go) and had its sockets made (serve.go); a connection to
// redis.sock is taken by the worker and relayed to the primary in force
// (relay.go, sentinel.go); a request on model.sock is checked for the
// worker's token and forwarded (model.go); a request on egress.sock is
// checked against the allowlists (allow.go), resolved and dialled
// (egress.go, egress_dial.go), a credential added where one applies
// (credstore.go, egress_credential.go). The Gateway only builds these
// parts and starts and stops them in a written order.
//
// A gateway started on a Dir serves again every worker directory it finds
// with a worker.json: a gateway restarted, even after SIGKILL, resumes
// every worker (stale socket files are replaced by new ones).
package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Gateway serves the control socket and every open worker's sockets. It
// holds its parts and their order, not their state.
type Gateway struct {
	dir  string
	log  *slog.Logger
	logs struct{ redis, model string } // the upstreams as the start line names them

	// life is the root of every context the gateway runs under: Stop
	// cancels it, and with it every loop, dial, wait and retry.
	life   context.Context
	cancel context.CancelFunc

	creds     *credentialStore
	sentinels *sentinels // nil: Config.Redis is host:port
	redis     *redisRelay
	models    *modelAPI // nil: no model.sock
	workers   *registry
	control   *controlAPI
	loops     sync.WaitGroup // the credentials file's poll, the sentinels' watch

	mu      sync.Mutex
	started bool
	stopped bool
}

// New checks cfg and builds a Gateway's parts; Start serves it.
func New(cfg Config) (*Gateway, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	creds, err := newCredentialStore(credentialParams{static: cfg.Credentials, file: cfg.CredentialsFile,
		poll: cfg.CredentialsPoll, log: cfg.Log})
	if err != nil {
		return nil, err
	}
	egress, err := newEgressPolicy(egressParams{allow: cfg.Allow, creds: creds, resolver: cfg.Resolver,
		dialer: cfg.DialEgress, dialTimeout: cfg.DialTimeout, maxConns: cfg.MaxConns, upstreamTLS: cfg.UpstreamTLS})
	if err != nil {
		return nil, err
	}
	models, err := newModelAPI(cfg.Model, cfg.DialTimeout, cfg.UpstreamTLS)
	if err != nil {
		return nil, err
	}
	// The gateway's life starts here, not with a caller's context: it
	// ends at Stop, whoever started it.
	life, cancel := context.WithCancel(context.Background())
	redis, sentinels, err := newRedis(life, cfg)
	if err != nil {
		cancel()
		return nil, err
	}
	g := &Gateway{dir: cfg.Dir, log: cfg.Log, life: life, cancel: cancel, creds: creds, sentinels: sentinels, redis: redis, models: models}
	g.logs.redis, g.logs.model = redis.name, cfg.Model
	g.workers = newRegistry(registryParams{dir: cfg.Dir, maxConns: cfg.MaxConns, log: cfg.Log,
		sockets: &workerSockets{root: cfg.Dir, uid: cfg.WorkerUID, redis: g.redis, model: models, egress: egress}})
	g.control = newControlAPI(controlParams{dir: cfg.Dir, defaultAllow: cfg.Allow, model: models != nil,
		workers: g.workers, creds: creds, log: cfg.Log})
	return g, nil
}

// newRedis builds the Redis relay of cfg.Redis, and for a sentinel URL
// the sentinel follower that names its primary (nil for host:port): a
// new primary closes the relay's connections to the old one.
func newRedis(life context.Context, cfg Config) (*redisRelay, *sentinels, error) {
	u, err := ParseRedis(cfg.Redis)
	if err != nil {
		return nil, nil, err
	}
	p := redisParams{upstream: fixedRedis(cfg.Redis), name: cfg.Redis, dialTimeout: cfg.DialTimeout, log: cfg.Log}
	if u == nil {
		return newRedisRelay(p), nil, nil
	}
	var relay *redisRelay // the follower's onSwitch closes its connections: made just below
	s := newSentinels(life, sentinelParams{url: *u, tls: cfg.SentinelTLS, timeout: cfg.DialTimeout,
		log: cfg.Log, onSwitch: func() { relay.closeOld() }})
	p.upstream, p.name = s, u.Redacted()
	relay = newRedisRelay(p)
	return relay, s, nil
}

// Start makes Dir, serves again every worker found there, and listens on
// the control socket. It fails when another gateway answers on it.
func (g *Gateway) Start() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.started {
		return errors.New("gateway: already started")
	}
	g.started = true
	if err := os.MkdirAll(g.dir, DirMode); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	if err := refuseSecondGateway(g.life, filepath.Join(g.dir, ControlSocket)); err != nil {
		return err
	}
	// The workers first: the manager's first request finds them served.
	n := g.workers.start(g.life)
	if err := g.control.start(); err != nil {
		g.workers.closeAll()
		return err
	}
	g.loops.Go(func() { g.creds.run(g.life) })
	if g.sentinels != nil {
		g.loops.Go(func() { g.sentinels.watch(g.life) })
	}
	g.log.Info("gateway started", "dir", g.dir, "redis", g.logs.redis, "model", g.logs.model, "workers", n)
	return nil
}

// refuseSecondGateway fails when a gateway answers on the control socket
// at path: two gateways must not serve one Dir.
func refuseSecondGateway(ctx context.Context, path string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var d net.Dialer
	if c, err := d.DialContext(ctx, "unix", path); err == nil {
		c.Close()
		return fmt.Errorf("gateway: another gateway serves %s", path)
	}
	return nil
}

// Run is Start, then Stop when ctx is done.
func (g *Gateway) Run(ctx context.Context) error {
	if err := g.Start(); err != nil {
		return err
	}
	<-ctx.Done()
	// ctx is done: the stop gets a bound of its own, on purpose.
	stop, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return g.Stop(stop)
}

// Stop closes the control socket, every worker's listeners and every open
// connection, and waits for their goroutines until ctx is done. The
// workers' directories stay: a gateway started again on Dir serves them.
//
// The order: (1) cancel the gateway's life, which ends the background
// loops and every worker's dials, waits and retries; (2) close every
// worker, so that no connection is taken any more; (3) shut the control
// API down, letting its requests under way finish (an open now fails:
// not running); (4) wait for the workers' goroutines and the loops; (5)
// drop the model transport's idle connections, which nothing uses now.
func (g *Gateway) Stop(ctx context.Context) error {
	g.mu.Lock()
	if g.stopped || !g.started {
		g.mu.Unlock()
		return nil
	}
	g.stopped = true
	g.mu.Unlock()
	g.cancel()
	workers := g.workers.closeAll()
	err := g.control.stop(ctx)
	for _, w := range workers {
		if werr := w.wait(ctx); werr != nil && err == nil {
			err = werr
		}
	}
	if werr := waitGroup(ctx, &g.loops); werr != nil && err == nil {
		err = fmt.Errorf("gateway: background loops still running: %w", werr)
	}
	if g.models != nil {
		g.models.close()
	}
	g.log.Info("gateway stopped")
	return err
}

// Open serves worker spec.WorkerID: its directory, worker.json and
// sockets. Opening an open worker stores its spec (allowlist, project,
// token) and does nothing else.
func (g *Gateway) Open(spec WorkerSpec) error { return g.workers.open(spec) }

// Close stops serving worker id: its listeners and every open connection
// of it are closed, and its directory removed. An unknown id is no error.
func (g *Gateway) Close(ctx context.Context, id string) error { return g.workers.close(ctx, id) }

// Rename makes open worker from's directory, sockets and connections
// worker to's: the directory is renamed on disk (a container that mounts
// it keeps it: a bind mount follows the directory, not its name), and
// its worker.json says to. A worker-manager renames a warm pool worker's
// directory after the hibernated worker that takes its container.
func (g *Gateway) Rename(from, to string) error { return g.workers.rename(from, to) }

// Workers returns the ids of the open workers, sorted.
func (g *Gateway) Workers() []string { return g.workers.ids() }

// Worker returns the spec of open worker id.
func (g *Gateway) Worker(id string) (WorkerSpec, bool) { return g.workers.spec(id) }

// Stats returns every open worker's counters.
func (g *Gateway) Stats() map[string]WorkerStats { return g.workers.stats() }

// ReloadCredentials reads the credentials file again (on SIGHUP). A file
// that cannot be read or is refused leaves the credentials in force as
// they were, and is returned.
func (g *Gateway) ReloadCredentials() error { return g.creds.reload() }
