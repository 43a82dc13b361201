// Package gateway is the data plane of sealed workers. A sealed worker's
// container has no network of its own (Docker's none network: loopback
// only); what it may reach comes through unix sockets in a directory of
// its own, mounted into the container and served by the gateway, a
// process of its own on each host beside the Docker engine. Because each
// worker has its own directory, the gateway knows who calls from which
// socket it was called on, with no secret in the container.
//
// Layout under Config.Dir:
//
//	control.sock        0600  the control API (HTTP): root only, never mounted
//	{id}/               0755  one directory per worker, mounted into its container
//	{id}/worker.json    0600  what the gateway was told (id, allow, project): read back at start
//	{id}/redis.sock     0666  relayed to Config.Redis over TCP
//	{id}/model.sock     0666  HTTP, forwarded to Config.Model over HTTPS with the worker's token (absent when Model is "")
//	{id}/egress.sock    0666  an HTTP forward proxy (CONNECT and http://) to what the worker's allowlist names
//
// redis.sock is a plain byte relay: the wrapper speaks Redis (or TLS)
// end to end through it, and Redis wants the worker user's password.
// model.sock takes HTTP requests that carry the worker's token, which
// only its wrapper holds, and forwards them to the model API over HTTPS
// (model.go): the agent beside the wrapper, which can connect to it too,
// reaches no model API through it with a key of its own. egress.sock is the agent's
// way out, host by host, as the worker's allowlist and the operator's
// (Config.Allow) say (egress.go, allow.go); it adds the operator's
// credentials to plain HTTP requests for the hosts they are for, which it
// forwards as HTTPS, so the container never holds them (credentials.go).
// The container's uid (1000)
// connects, so the
// worker sockets are 0666; the directory is root's, so nothing in the
// container can replace them.
//
// A gateway started on a Dir serves again every worker directory it finds
// with a worker.json: a gateway restarted, even after SIGKILL, resumes
// every worker (stale socket files are replaced by new ones). The worker
// manager opens and closes workers through Client.
package gateway

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Names of the files of Config.Dir and of each worker's directory.
const (
	ControlSocket = "control.sock"
	RedisSocket   = "redis.sock"
	ModelSocket   = "model.sock"
	EgressSocket  = "egress.sock"
	WorkerFile    = "worker.json"
)

// Modes of what the gateway makes: the worker's directory and sockets are
// for the container's uid to traverse and connect to; the control socket
// and worker.json are root's alone.
const (
	DirMode           os.FileMode = 0o755
	WorkerSocketMode  os.FileMode = 0o666
	ControlSocketMode os.FileMode = 0o600
	WorkerFileMode    os.FileMode = 0o600
)

// maxSocketPath is the longest path a unix socket may have on Linux.
const maxSocketPath = 107

// DefaultMaxConns is Config.MaxConns when it is 0.
const DefaultMaxConns = 256

// Config configures a Gateway.
type Config struct {
	Dir string // where control.sock and the workers' directories are
	// Redis is the upstream Redis: host:port (TCP), or a sentinel URL
	// (redis+sentinel://host1:port1,host2:port2/master, without the data
	// user's credentials; ParseRedis), whose primary each connection is
	// relayed to and followed across failovers (sentinel.go).
	Redis string
	// Model is the upstream model API: host:port (spoken to over HTTPS),
	// or a URL https://host[:port], or http://host[:port] for a plain
	// HTTP model server on the host (a test's stub); "": no model.sock.
	Model string
	Log   *slog.Logger // nil: discard
	// MaxConns bounds the connections one worker holds open at once (0:
	// DefaultMaxConns): a container that opens connections without end
	// runs out of its own share, not of the gateway's descriptors.
	MaxConns int
	// DialTimeout bounds a dial of an upstream, and a name's resolution
	// for egress (0: 5 s).
	DialTimeout time.Duration
	// Allow is the operator's egress allowlist, in force for every
	// worker besides its own (allow.go has the syntax). Empty: each
	// worker reaches what its own list names, no more.
	Allow []string
	// Resolver resolves an allowed name of an egress request to IP
	// addresses (nil: net.DefaultResolver.LookupHost). DialEgress dials
	// one of them, "ip:port" over "tcp" (nil: a net.Dialer). Both are for
	// tests, which map names to loopback test servers, and for embedding.
	Resolver   func(ctx context.Context, host string) ([]string, error)
	DialEgress func(ctx context.Context, network, addr string) (net.Conn, error)
	// Credentials are headers the gateway adds to a worker's requests to
	// a host, which the container never holds (credentials.go). The
	// credentials of CredentialsFile (a JSON file of mode 0600; ""
	// none) come after them; the file is read at Start, again by
	// ReloadCredentials, and every CredentialsPoll when it changed.
	Credentials     []Credential
	CredentialsFile string
	// CredentialsPoll is how often the credentials file is checked for a
	// change (0: 10 s).
	CredentialsPoll time.Duration
	// UpstreamTLS configures the TLS the gateway speaks to a credentialed
	// host and to the model API (nil: the system's roots); an empty
	// ServerName is the request's host. For tests (a loopback TLS server)
	// and embedding.
	UpstreamTLS *tls.Config
	// SentinelTLS configures the TLS the gateway speaks to the sentinels
	// of a rediss+sentinel:// Redis (nil: the system's roots, ServerName
	// the sentinel's host). For tests and embedding.
	SentinelTLS *tls.Config
}

var idRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)

// ValidID reports why id cannot name a worker of the gateway, or nil: 1 to
// 64 letters, digits, '-' or '_', the first a letter or digit. An id is a
// directory name under Config.Dir, so nothing else is allowed ('/', '.').
func ValidID(id string) error {
	if !idRe.MatchString(id) {
		return fmt.Errorf("gateway: invalid worker id %q: want 1 to 64 letters, digits, '-' or '_', starting with a letter or digit", id)
	}
	return nil
}

// WorkerSpec is the body of PUT /workers/{id}, and worker.json.
type WorkerSpec struct {
	WorkerID string `json:"worker_id"`
	// Allow is the worker's egress allowlist (allow.go has the syntax),
	// in force on its egress.sock besides Config.Allow.
	Allow []string `json:"allow"`
	// ProjectID is the project the worker works for: a credential scoped
	// to projects applies to the workers of those projects.
	ProjectID string `json:"project_id,omitempty"`
	// ModelToken is the secret every request of the worker's model.sock
	// carries (ModelTokenHeader): its wrapper's, made by the manager.
	// Empty on a PUT of an open worker: the token it has stays. A worker
	// without one has every model request refused. The control API never
	// shows it.
	ModelToken string `json:"model_token,omitempty"`
}

// validProject reports why p cannot be a worker's project id, or nil: at
// most 256 printable ASCII characters ("" is no project).
func validProject(p string) error {
	if len(p) > 256 || printable(p) != p {
		return fmt.Errorf("gateway: project_id %q: want at most 256 printable ASCII characters, no spaces", printable(p))
	}
	return nil
}

// Gateway serves the control socket and every open worker's sockets.
type Gateway struct {
	cfg      Config
	log      *slog.Logger
	defaults allowlist // Config.Allow

	// model is Config.Model parsed (nil: none); modelTr carries every
	// worker's model requests to it.
	model   *url.URL
	modelTr *http.Transport

	// creds are the credentials in force: Config.Credentials, then the
	// file's. credsMu serialises reloads; credsFile is the version read.
	creds     atomic.Pointer[credentials]
	credsMu   sync.Mutex
	credsFile credentialsFile
	stopPoll  chan struct{}

	// primary follows the Sentinel primary (nil: Config.Redis is
	// host:port); watching its sentinels runs from Start to Stop.
	primary   *sentinels
	stopWatch context.CancelFunc
	watching  sync.WaitGroup
	redisLog  string // Config.Redis as logs show it (no password)

	mu      sync.Mutex
	workers map[string]*worker
	started bool
	stopped bool
	ctl     net.Listener
	srv     *http.Server
	done    chan struct{} // closed when the control server returns
}

// New checks cfg and returns a Gateway; Start serves it.
func New(cfg Config) (*Gateway, error) {
	if cfg.Dir == "" {
		return nil, errors.New("gateway: no Dir")
	}
	sentinelURL, err := ParseRedis(cfg.Redis)
	if err != nil {
		return nil, err
	}
	model, err := ParseModel(cfg.Model)
	if err != nil {
		return nil, err
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	defaults, err := parseAllow(cfg.Allow)
	if err != nil {
		return nil, fmt.Errorf("%w (in Config.Allow)", err)
	}
	cfg.Allow = slices.Clone(cfg.Allow)
	abs, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("gateway: Dir: %w", err)
	}
	cfg.Dir = abs
	// A unix socket's path is at most 107 bytes: the longest id's sockets
	// must fit.
	if n := len(filepath.Join(abs, strings.Repeat("x", 64), ModelSocket)); n > maxSocketPath {
		return nil, fmt.Errorf("gateway: Dir %s is too long: a worker's socket path would be %d bytes, at most %d", abs, n, maxSocketPath)
	}
	if cfg.CredentialsPoll <= 0 {
		cfg.CredentialsPoll = 10 * time.Second
	}
	static, err := parseCredentials("Config.Credentials", cfg.Credentials)
	if err != nil {
		return nil, err
	}
	cfg.Credentials = slices.Clone(cfg.Credentials)
	g := &Gateway{cfg: cfg, log: log, defaults: defaults, model: model, workers: map[string]*worker{}, done: make(chan struct{}), stopPoll: make(chan struct{})}
	if model != nil {
		g.modelTr = g.newModelTransport()
	}
	g.redisLog = cfg.Redis
	if sentinelURL != nil {
		g.redisLog = sentinelURL.Redacted()
		g.primary = newSentinels(*sentinelURL, cfg.SentinelTLS, cfg.DialTimeout, log, g.closeOldRedis)
	}
	g.creds.Store(&static)
	if cfg.CredentialsFile != "" {
		// Read at New, so that a bad file stops the gateway before it
		// serves anything.
		if err := g.loadCredentials(true); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// ReloadCredentials reads the credentials file again (on SIGHUP). A file
// that cannot be read or is refused leaves the credentials in force as
// they were, and is returned.
func (g *Gateway) ReloadCredentials() error {
	if g.cfg.CredentialsFile == "" {
		return nil
	}
	err := g.loadCredentials(true)
	if err != nil {
		g.log.Error("credentials file not reloaded: the credentials in force stay", "err", err)
	}
	return err
}

// loadCredentials reads the credentials file when force or when it
// changed since it was read, and puts its credentials in force.
func (g *Gateway) loadCredentials(force bool) error {
	g.credsMu.Lock()
	defer g.credsMu.Unlock()
	if !force {
		fi, err := os.Stat(g.cfg.CredentialsFile)
		if err == nil && fi.ModTime().Equal(g.credsFile.mtime) && fi.Size() == g.credsFile.size {
			return nil
		}
	}
	cf, err := readCredentialsFile(g.cfg.CredentialsFile)
	if err != nil {
		return err
	}
	static, _ := parseCredentials("Config.Credentials", g.cfg.Credentials)
	file, _ := parseCredentials("credentials file", cf.creds)
	all := append(static, file...)
	g.credsFile = cf
	g.creds.Store(&all)
	hosts := make([]string, 0, len(all))
	for _, c := range all {
		hosts = append(hosts, c.host.String())
	}
	g.log.Info("credentials loaded", "file", g.cfg.CredentialsFile, "count", len(all), "hosts", hosts)
	return nil
}

// pollCredentials reads the credentials file again when it changes,
// until the gateway stops.
func (g *Gateway) pollCredentials() {
	t := time.NewTicker(g.cfg.CredentialsPoll)
	defer t.Stop()
	for {
		select {
		case <-g.stopPoll:
			return
		case <-t.C:
			if err := g.loadCredentials(false); err != nil {
				g.log.Error("credentials file not reloaded: the credentials in force stay", "err", err)
			}
		}
	}
}

// credentials returns the credentials in force.
func (g *Gateway) credentials() credentials { return *g.creds.Load() }

func (g *Gateway) resolver(ctx context.Context, host string) ([]string, error) {
	if g.cfg.Resolver != nil {
		return g.cfg.Resolver(ctx, host)
	}
	return net.DefaultResolver.LookupHost(ctx, host)
}

func (g *Gateway) dialEgress(ctx context.Context, network, addr string) (net.Conn, error) {
	if g.cfg.DialEgress != nil {
		return g.cfg.DialEgress(ctx, network, addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
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
	if err := os.MkdirAll(g.cfg.Dir, DirMode); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	ctlPath := filepath.Join(g.cfg.Dir, ControlSocket)
	if c, err := net.DialTimeout("unix", ctlPath, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("gateway: another gateway serves %s", ctlPath)
	}
	g.resume()
	l, err := listenUnix(g.cfg.Dir, g.cfg.Dir, ControlSocket, ControlSocketMode)
	if err != nil {
		g.closeWorkers()
		return fmt.Errorf("gateway: control socket: %w", err)
	}
	g.ctl = l
	g.srv = &http.Server{Handler: g.handler(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(g.log.Handler(), slog.LevelWarn)}
	go func() {
		defer close(g.done)
		if err := g.srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			g.log.Error("control socket", "err", err)
		}
	}()
	if g.cfg.CredentialsFile != "" {
		go g.pollCredentials()
	}
	if g.primary != nil {
		ctx, cancel := context.WithCancel(context.Background())
		g.stopWatch = cancel
		g.primary.watch(ctx, &g.watching)
	}
	g.log.Info("gateway started", "dir", g.cfg.Dir, "redis", g.redisLog, "model", g.cfg.Model, "workers", len(g.workers))
	return nil
}

// Run is Start, then Stop when ctx is done.
func (g *Gateway) Run(ctx context.Context) error {
	if err := g.Start(); err != nil {
		return err
	}
	<-ctx.Done()
	stop, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return g.Stop(stop)
}

// Stop closes the control socket, every worker's listeners and every open
// connection, and waits for their goroutines until ctx is done. The
// workers' directories stay: a gateway started again on Dir serves them.
func (g *Gateway) Stop(ctx context.Context) error {
	g.mu.Lock()
	if g.stopped || !g.started {
		g.mu.Unlock()
		return nil
	}
	g.stopped = true
	close(g.stopPoll)
	if g.stopWatch != nil {
		g.stopWatch()
	}
	srv, ctl := g.srv, g.ctl
	workers := g.closeWorkers()
	g.mu.Unlock()
	var err error
	if srv != nil {
		err = srv.Shutdown(ctx)
		_ = os.Remove(ctl.Addr().String())
		select {
		case <-g.done:
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	for _, w := range workers {
		if werr := w.wait(ctx); werr != nil && err == nil {
			err = werr
		}
	}
	g.watching.Wait()
	if g.modelTr != nil {
		g.modelTr.CloseIdleConnections()
	}
	g.log.Info("gateway stopped")
	return err
}

// closeOldRedis closes every relayed connection to a Redis primary the
// sentinels no longer name, on every worker: the wrappers reconnect
// through the same socket and reach the new one.
func (g *Gateway) closeOldRedis() {
	gen := g.primary.gen.Load()
	g.mu.Lock()
	ws := make([]*worker, 0, len(g.workers))
	for _, w := range g.workers {
		ws = append(ws, w)
	}
	g.mu.Unlock()
	n := 0
	for _, w := range ws {
		n += w.closeOldPrimary(gen)
	}
	g.log.Info("redis connections to the old primary closed", "connections", n)
}

// closeWorkers closes every worker (g.mu held) and returns them.
func (g *Gateway) closeWorkers() []*worker {
	var ws []*worker
	for id, w := range g.workers {
		w.close()
		ws = append(ws, w)
		delete(g.workers, id)
	}
	return ws
}

// resume serves again every worker directory of Dir with a worker.json.
// A directory it cannot serve is logged and left as it is.
func (g *Gateway) resume() {
	entries, err := os.ReadDir(g.cfg.Dir)
	if err != nil {
		g.log.Error("resume: read dir", "dir", g.cfg.Dir, "err", err)
		return
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if len(e.Name()) > 0 && e.Name()[0] == '.' {
			// A staging directory left by a gateway killed mid-listen.
			_ = os.RemoveAll(filepath.Join(g.cfg.Dir, e.Name()))
			continue
		}
		if ValidID(e.Name()) != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(g.cfg.Dir, e.Name(), WorkerFile))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		var spec WorkerSpec
		if err == nil {
			err = json.Unmarshal(b, &spec)
		}
		if err == nil && spec.WorkerID != e.Name() {
			err = fmt.Errorf("worker_id %q in the directory of %q", spec.WorkerID, e.Name())
		}
		if err == nil {
			_, err = g.openLocked(spec)
		}
		if err != nil {
			g.log.Error("resume: worker not served", "worker_id", e.Name(), "err", err)
			continue
		}
		g.log.Info("worker resumed", "worker_id", e.Name())
	}
}

// Open serves worker spec.WorkerID: its directory, worker.json and
// sockets. Opening an open worker stores its allowlist and does nothing
// else.
func (g *Gateway) Open(spec WorkerSpec) error {
	if err := ValidID(spec.WorkerID); err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped || !g.started {
		return errors.New("gateway: not running")
	}
	_, err := g.openLocked(spec)
	return err
}

func (g *Gateway) openLocked(spec WorkerSpec) (*worker, error) {
	if spec.Allow == nil {
		spec.Allow = []string{}
	}
	allow, err := parseAllow(spec.Allow)
	if err != nil {
		return nil, &SpecError{err}
	}
	if err := validProject(spec.ProjectID); err != nil {
		return nil, &SpecError{err}
	}
	dir := filepath.Join(g.cfg.Dir, spec.WorkerID)
	if w := g.workers[spec.WorkerID]; w != nil && w.intact() {
		old := w.spec()
		if spec.ModelToken == "" {
			spec.ModelToken = old.ModelToken
		}
		if !slices.Equal(old.Allow, spec.Allow) || old.ProjectID != spec.ProjectID || old.ModelToken != spec.ModelToken {
			if err := writeSpec(dir, spec); err != nil {
				return nil, err
			}
			w.setSpec(spec, allow)
			g.log.Info("worker's spec changed", "worker_id", spec.WorkerID, "allow", spec.Allow, "project_id", spec.ProjectID,
				"model_token_changed", old.ModelToken != spec.ModelToken)
		}
		return w, nil
	} else if w != nil {
		// Its sockets were removed under it: serve it anew.
		g.log.Warn("worker's sockets missing: opening it again", "worker_id", spec.WorkerID)
		if spec.ModelToken == "" {
			spec.ModelToken = w.spec().ModelToken
		}
		w.close()
		delete(g.workers, spec.WorkerID)
	}
	if err := os.Mkdir(dir, DirMode); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	// The directory must be a directory of its own (not a link to
	// elsewhere), root's, 0755 whatever the umask.
	if fi, err := os.Lstat(dir); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("gateway: %s is not a directory", dir)
	}
	if err := os.Chmod(dir, DirMode); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	if err := writeSpec(dir, spec); err != nil {
		return nil, err
	}
	w := newWorker(g, spec, allow, dir)
	if err := g.listenWorker(w, dir); err != nil {
		w.close()
		return nil, err
	}
	g.workers[spec.WorkerID] = w
	g.log.Info("worker opened", "worker_id", spec.WorkerID, "dir", dir)
	return w, nil
}

// listenWorker makes and serves a new worker's sockets in dir.
func (g *Gateway) listenWorker(w *worker, dir string) error {
	l, err := listenUnix(g.cfg.Dir, dir, RedisSocket, WorkerSocketMode)
	if err != nil {
		return fmt.Errorf("gateway: worker %s: %s: %w", w.ID(), RedisSocket, err)
	}
	w.serve(l, RedisSocket, g.cfg.Redis)
	if g.model == nil {
		_ = os.Remove(filepath.Join(dir, ModelSocket))
	} else {
		if l, err = listenUnix(g.cfg.Dir, dir, ModelSocket, WorkerSocketMode); err != nil {
			return fmt.Errorf("gateway: worker %s: %s: %w", w.ID(), ModelSocket, err)
		}
		w.serveModel(l)
	}
	if l, err = listenUnix(g.cfg.Dir, dir, EgressSocket, WorkerSocketMode); err != nil {
		return fmt.Errorf("gateway: worker %s: %s: %w", w.ID(), EgressSocket, err)
	}
	w.serveEgress(l)
	return nil
}

// SpecError is a WorkerSpec the gateway refuses (a bad allowlist entry).
type SpecError struct{ Err error }

func (e *SpecError) Error() string { return e.Err.Error() }
func (e *SpecError) Unwrap() error { return e.Err }

// Close stops serving worker id: its listeners and every open connection
// of it are closed, and its directory removed. An unknown id is no error.
func (g *Gateway) Close(ctx context.Context, id string) error {
	if err := ValidID(id); err != nil {
		return err
	}
	g.mu.Lock()
	w := g.workers[id]
	delete(g.workers, id)
	if w != nil {
		w.close()
	}
	dir := filepath.Join(g.cfg.Dir, id)
	err := os.RemoveAll(dir)
	g.mu.Unlock()
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	if w != nil {
		g.log.Info("worker closed", "worker_id", id)
		return w.wait(ctx)
	}
	return nil
}

// Rename makes open worker from's directory, sockets and connections
// worker to's: the directory is renamed on disk (a container that mounts
// it keeps it: a bind mount follows the directory, not its name), and
// its worker.json says to. A worker-manager renames a warm pool worker's
// directory after the hibernated worker that takes its container.
func (g *Gateway) Rename(from, to string) error {
	if err := ValidID(from); err != nil {
		return err
	}
	if err := ValidID(to); err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	w := g.workers[from]
	if w == nil {
		return fmt.Errorf("gateway: worker %s is not open: %w", from, os.ErrNotExist)
	}
	if g.workers[to] != nil {
		return fmt.Errorf("gateway: worker %s is open already: %w", to, os.ErrExist)
	}
	dir := filepath.Join(g.cfg.Dir, to)
	if err := os.Rename(w.dir, dir); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	w.mu.Lock()
	w.id.Store(&to)
	w.dir = dir
	w.s.WorkerID = to
	for _, l := range w.listeners {
		l.path = filepath.Join(dir, filepath.Base(l.path))
	}
	spec := w.s
	w.mu.Unlock()
	delete(g.workers, from)
	g.workers[to] = w
	g.log.Info("worker renamed", "worker_id", to, "was", from)
	return writeSpec(dir, spec)
}

// Workers returns the ids of the open workers, sorted.
func (g *Gateway) Workers() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	ids := make([]string, 0, len(g.workers))
	for id := range g.workers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// WorkerStats are one worker's counters since it was opened (or resumed).
type WorkerStats struct {
	Accepted   int64 `json:"accepted"`    // connections accepted, on every socket
	Open       int64 `json:"open"`        // connections open now
	Refused    int64 `json:"refused"`     // connections closed at once: over MaxConns
	DialErrors int64 `json:"dial_errors"` // connections closed because the upstream refused
	BytesUp    int64 `json:"bytes_up"`    // bytes relayed from the container to the upstreams
	BytesDown  int64 `json:"bytes_down"`  // bytes relayed from the upstreams to the container
	// Egress requests (CONNECT or plain HTTP) on egress.sock: passed on,
	// and answered 403 (not on the allowlist, or a name resolved to a
	// local address).
	EgressAllowed int64 `json:"egress_allowed"`
	EgressRefused int64 `json:"egress_refused"`
	// EgressCredentialed counts the allowed requests the gateway added a
	// credential to.
	EgressCredentialed int64 `json:"egress_credentialed"`
	// Requests on model.sock: forwarded to the model API (with the
	// worker's token), and answered 403 (without it: the agent's own).
	ModelRequests int64 `json:"model_requests"`
	ModelRefused  int64 `json:"model_refused"`
}

// Stats returns every open worker's counters.
func (g *Gateway) Stats() map[string]WorkerStats {
	g.mu.Lock()
	defer g.mu.Unlock()
	m := make(map[string]WorkerStats, len(g.workers))
	for id, w := range g.workers {
		m[id] = WorkerStats{Accepted: w.accepted.Load(), Open: w.open.Load(), Refused: w.refused.Load(),
			DialErrors: w.dialErrors.Load(), BytesUp: w.bytesUp.Load(), BytesDown: w.bytesDown.Load(),
			EgressAllowed: w.egressAllowed.Load(), EgressRefused: w.egressRefused.Load(),
			EgressCredentialed: w.egressCredentialed.Load(),
			ModelRequests:      w.modelForwarded.Load(), ModelRefused: w.modelRefused.Load()}
	}
	return m
}

// writeSpec writes dir/worker.json whole (a temporary file renamed).
func writeSpec(dir string, spec WorkerSpec) error {
	b, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, "."+WorkerFile+".tmp")
	if err := os.WriteFile(tmp, b, WorkerFileMode); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, WorkerFile)); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("gateway: %w", err)
	}
	return nil
}

// listenUnix listens on dir/name with the given mode, replacing a stale
// socket file there. The socket is made in a private directory (0700) of
// root, given its mode, then renamed into place: nobody connects to it
// before it has its mode, whatever the umask, and a client connecting
// meanwhile reaches either the old file or the new socket.
func listenUnix(root, dir, name string, mode os.FileMode) (*unixListener, error) {
	stage, err := os.MkdirTemp(root, ".stage-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(stage)
	tmp := filepath.Join(stage, name)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, err
	}
	// The path the listener was made on is gone once renamed; the gateway
	// removes the files it means to remove itself.
	l.SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, mode); err != nil {
		l.Close()
		return nil, err
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		l.Close()
		return nil, err
	}
	return &unixListener{l, filepath.Join(dir, name)}, nil
}

// unixListener is a listener whose Addr is the path it serves on.
type unixListener struct {
	*net.UnixListener
	path string
}

func (l *unixListener) Addr() net.Addr { return &net.UnixAddr{Name: l.path, Net: "unix"} }

// worker is one open worker: its listeners and open connections.
type worker struct {
	g      *Gateway
	id     atomic.Pointer[string] // the worker's id now (a rename changes it): read by every log line
	dir    string
	ctx    context.Context // done when the worker is closed: aborts dials
	cancel context.CancelFunc

	mu    sync.Mutex
	s     WorkerSpec
	allow atomic.Pointer[allowlist] // s.Allow parsed: read at each egress request
	// modelToken is s.ModelToken, read at each model request.
	modelToken atomic.Pointer[string]
	egress     *egress
	model      *modelProxy
	closed     bool
	listeners  []*unixListener
	conns      map[net.Conn]struct{}
	// redisUps are the upstream connections to a Sentinel primary, each
	// with the gen of the primary it was dialled to (sentinels.gen).
	redisUps map[net.Conn]uint64
	wg       sync.WaitGroup

	accepted, open, refused, dialErrors, bytesUp, bytesDown atomic.Int64
	egressAllowed, egressRefused, egressCredentialed        atomic.Int64
	modelForwarded, modelRefused                            atomic.Int64
}

func newWorker(g *Gateway, spec WorkerSpec, allow allowlist, dir string) *worker {
	ctx, cancel := context.WithCancel(context.Background())
	w := &worker{g: g, dir: dir, ctx: ctx, cancel: cancel, s: spec, conns: map[net.Conn]struct{}{}, redisUps: map[net.Conn]uint64{}}
	w.id.Store(&spec.WorkerID)
	w.allow.Store(&allow)
	w.modelToken.Store(&spec.ModelToken)
	return w
}

// allows reports whether the allowlist in force (the operator's and the
// worker's) allows t.
func (w *worker) allows(t target) bool {
	return w.g.defaults.allows(t) || w.allow.Load().allows(t)
}

// logger is the log of one of the worker's sockets: each line names the
// worker's id as it is when the line is written (a rename, a warm pool
// worker's container given to a woken worker, changes it).
func (w *worker) logger(socket string) *slog.Logger {
	return slog.New(idHandler{h: w.g.log.Handler(), w: w}).With("socket", socket)
}

// ID returns the worker's id now.
func (w *worker) ID() string { return *w.id.Load() }

// idHandler writes worker_id, read at each line, then the attributes
// given to the logger (With), then the line's own, through h.
type idHandler struct {
	h     slog.Handler
	w     *worker
	attrs []slog.Attr
}

func (i idHandler) Enabled(ctx context.Context, l slog.Level) bool { return i.h.Enabled(ctx, l) }

func (i idHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	out.AddAttrs(slog.String("worker_id", i.w.ID()))
	out.AddAttrs(i.attrs...)
	r.Attrs(func(a slog.Attr) bool { out.AddAttrs(a); return true })
	return i.h.Handle(ctx, out)
}

func (i idHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return idHandler{h: i.h, w: i.w, attrs: append(slices.Clip(i.attrs), as...)}
}

// WithGroup writes the attributes given so far before worker_id: a group
// holds what follows.
func (i idHandler) WithGroup(name string) slog.Handler {
	return idHandler{h: i.h.WithAttrs(i.attrs).WithGroup(name), w: i.w}
}

func (w *worker) spec() WorkerSpec {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.s
}

func (w *worker) setSpec(s WorkerSpec, allow allowlist) {
	w.mu.Lock()
	w.s = s
	w.allow.Store(&allow)
	w.modelToken.Store(&s.ModelToken)
	w.mu.Unlock()
}

// intact reports whether every socket file the worker listens on is still
// there.
func (w *worker) intact() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, l := range w.listeners {
		if fi, err := os.Lstat(l.path); err != nil || fi.Mode().Type() != os.ModeSocket {
			return false
		}
	}
	return !w.closed
}

// serve accepts connections on l and relays each to addr.
func (w *worker) serve(l *unixListener, name, addr string) {
	w.mu.Lock()
	w.listeners = append(w.listeners, l)
	w.wg.Add(1)
	w.mu.Unlock()
	go func() {
		defer w.wg.Done()
		for !w.acceptLoop(l, name, addr) {
			time.Sleep(10 * time.Millisecond)
		}
	}()
}

// serveEgress serves the worker's egress proxy on l.
func (w *worker) serveEgress(l *unixListener) {
	e := newEgress(w)
	w.mu.Lock()
	w.listeners = append(w.listeners, l)
	w.egress = e
	w.wg.Add(1)
	w.mu.Unlock()
	go func() {
		defer w.wg.Done()
		e.serve(l)
	}()
}

// serveModel serves the worker's model proxy on l.
func (w *worker) serveModel(l *unixListener) {
	m := newModelProxy(w)
	w.mu.Lock()
	w.listeners = append(w.listeners, l)
	w.model = m
	w.wg.Add(1)
	w.mu.Unlock()
	go func() {
		defer w.wg.Done()
		m.serve(l)
	}()
}

// acceptLoop accepts connections on l until it is closed (true), or a
// panic ends it (false, after logging it): the caller starts it again.
func (w *worker) acceptLoop(l *unixListener, name, addr string) (ended bool) {
	log := w.logger(name)
	defer func() {
		if r := recover(); r != nil {
			log.Error("accept loop panicked", "panic", r, "stack", string(debug.Stack()))
			ended = w.ctx.Err() != nil
		}
	}()
	var backoff time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			if w.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return true
			}
			// Out of descriptors or the like: wait and go on, as the
			// next connection may well be served.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			log.Warn("accept", "err", err, "retry_in", backoff)
			select {
			case <-time.After(backoff):
			case <-w.ctx.Done():
				return true
			}
			continue
		}
		backoff = 0
		w.accepted.Add(1)
		if !w.track(c, true, true) {
			continue
		}
		go w.relay(c, name, addr, log)
	}
}

// track adds c to the worker's connections (on) or removes it; client
// says it is one the container made (not an upstream), counted in Open
// and bounded by MaxConns. A connection the worker cannot take (closed,
// or a client at MaxConns) is closed and track returns false.
func (w *worker) track(c net.Conn, on, client bool) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !on {
		if _, ok := w.conns[c]; ok {
			delete(w.conns, c)
			if client {
				w.open.Add(-1)
			}
			w.wg.Done()
		}
		return true
	}
	if w.closed || client && w.open.Load() >= int64(w.g.cfg.MaxConns) {
		if !w.closed {
			w.refused.Add(1)
		}
		c.Close()
		return false
	}
	w.conns[c] = struct{}{}
	if client {
		w.open.Add(1)
	}
	w.wg.Add(1)
	return true
}

// trackPrimary records up as a connection to the primary of gen, or
// reports false when the sentinels named another since: a connection
// dialled just before a switch must not outlive the sweep of
// closeOldRedis, which takes w.mu after gen moved on.
func (w *worker) trackPrimary(up net.Conn, gen uint64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.g.primary.gen.Load() != gen {
		return false
	}
	w.redisUps[up] = gen
	return true
}

func (w *worker) untrackPrimary(up net.Conn) {
	w.mu.Lock()
	delete(w.redisUps, up)
	w.mu.Unlock()
}

// closeOldPrimary closes every connection of the worker to a primary
// older than gen; each relay then closes its container's side.
func (w *worker) closeOldPrimary(gen uint64) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for c, g := range w.redisUps {
		if g != gen {
			c.Close()
			delete(w.redisUps, c)
			n++
		}
	}
	return n
}

// relay dials addr and copies bytes both ways between c and it until both
// sides are done. Nothing the container sends ends the process: a panic
// here closes this connection only.
func (w *worker) relay(c net.Conn, name, addr string, log *slog.Logger) {
	var up net.Conn
	defer func() {
		if r := recover(); r != nil {
			log.Error("relay panicked", "panic", r, "stack", string(debug.Stack()))
		}
		c.Close()
		w.track(c, false, true)
		if up != nil {
			up.Close()
			w.track(up, false, false)
			w.untrackPrimary(up)
		}
	}()
	sentinel := name == RedisSocket && w.g.primary != nil
	var (
		gen uint64
		err error
	)
	if sentinel {
		var primary string
		addr = w.g.redisLog // what a failed lookup logs: never the sentinels' password
		if primary, gen, err = w.g.primary.primary(w.ctx); err == nil {
			addr = primary
		}
	}
	if err == nil {
		d := net.Dialer{Timeout: w.g.cfg.DialTimeout}
		up, err = d.DialContext(w.ctx, "tcp", addr)
		if err != nil && sentinel {
			w.g.primary.forget(addr)
		}
	}
	if err != nil {
		up = nil
		w.dialErrors.Add(1)
		if w.ctx.Err() == nil {
			log.Warn("dial upstream", "addr", addr, "err", err)
		}
		return
	}
	// The upstream is tracked to be closed with the worker, and a
	// primary's when the sentinels name another.
	if !w.track(up, true, false) {
		up = nil
		return
	}
	if sentinel && !w.trackPrimary(up, gen) {
		return // the deferred cleanup closes it
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if r := recover(); r != nil {
				log.Error("relay panicked", "panic", r, "stack", string(debug.Stack()))
				c.Close()
				up.Close()
			}
		}()
		pipe(up, c, &w.bytesUp)
	}()
	pipe(c, up, &w.bytesDown)
	<-done
}

// pipe copies src to dst, counting bytes into n as they go. At src's end
// it closes dst's write side, so that the other side sees the end of what
// was sent and may still answer (half-close); on an error it closes both.
func pipe(dst, src net.Conn, n *atomic.Int64) {
	buf := make([]byte, 16<<10)
	for {
		k, rerr := src.Read(buf)
		if k > 0 {
			if _, werr := dst.Write(buf[:k]); werr != nil {
				src.Close()
				dst.Close()
				return
			}
			n.Add(int64(k))
		}
		if rerr == io.EOF {
			if cw, ok := dst.(interface{ CloseWrite() error }); ok {
				if cw.CloseWrite() == nil {
					return
				}
			}
			dst.Close()
			return
		}
		if rerr != nil {
			src.Close()
			dst.Close()
			return
		}
	}
}

// close closes the worker's listeners and open connections and cancels
// its dials; wait waits for their goroutines.
func (w *worker) close() {
	w.cancel()
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	for _, l := range w.listeners {
		l.Close()
	}
	for c := range w.conns {
		c.Close()
	}
	e, m := w.egress, w.model
	w.mu.Unlock()
	// Outside w.mu: the proxies' connections leave w.conns as they close.
	if e != nil {
		e.close()
	}
	if m != nil {
		m.close()
	}
}

func (w *worker) wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() { w.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("gateway: worker %s: connections still closing: %w", w.ID(), ctx.Err())
	}
}
