package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
)

// registry is the set of open workers, and their directories under
// Config.Dir: it opens, closes and renames workers, and at start serves
// again every worker a gateway left there (even one killed).
type registry struct {
	dir      string // Config.Dir
	maxConns int
	log      *slog.Logger
	sockets  socketMaker

	mu      sync.Mutex
	life    context.Context // the workers' parent: the gateway's, done at Stop (set by start)
	workers map[string]*worker
	running bool // between start and closeAll: open refuses otherwise
}

var _ workerDirectory = (*registry)(nil) // the control API's calls

// socketMaker makes and serves a new worker's sockets.
type socketMaker interface {
	listen(w *worker) error
}

// registryParams are what the registry is built from.
type registryParams struct {
	dir      string
	maxConns int
	log      *slog.Logger
	sockets  socketMaker
}

func newRegistry(p registryParams) *registry {
	return &registry{dir: p.dir, maxConns: p.maxConns, log: p.log, sockets: p.sockets, workers: map[string]*worker{}}
}

// start serves again every worker directory of Dir with a worker.json,
// and opens the registry to new workers until closeAll. A directory it
// cannot serve is logged and left as it is. It returns how many workers
// it serves.
func (r *registry) start(life context.Context) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.life, r.running = life, true
	entries, err := os.ReadDir(r.dir)
	if err != nil {
		r.log.Error("resume: read dir", "dir", r.dir, "err", err)
		return 0
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if len(e.Name()) > 0 && e.Name()[0] == '.' {
			// A staging directory left by a gateway killed mid-listen.
			_ = os.RemoveAll(filepath.Join(r.dir, e.Name()))
			continue
		}
		if ValidID(e.Name()) != nil {
			continue
		}
		spec, err := readSpec(filepath.Join(r.dir, e.Name()), e.Name())
		if errors.Is(err, errNoSpec) {
			continue
		}
		if err == nil {
			_, err = r.openLocked(spec)
		}
		if err != nil {
			r.log.Error("resume: worker not served", "worker_id", e.Name(), "err", err)
			continue
		}
		r.log.Info("worker resumed", "worker_id", e.Name())
	}
	return len(r.workers)
}

// open serves worker spec.WorkerID: its directory, worker.json and
// sockets. Opening an open worker stores its spec and does nothing else.
func (r *registry) open(spec WorkerSpec) error {
	if err := ValidID(spec.WorkerID); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.running {
		return errors.New("gateway: not running")
	}
	_, err := r.openLocked(spec)
	return err
}

func (r *registry) openLocked(spec WorkerSpec) (*worker, error) {
	if spec.Allow == nil {
		spec.Allow = []string{}
	}
	allow, err := checkSpec(spec)
	if err != nil {
		return nil, err
	}
	if w := r.workers[spec.WorkerID]; w != nil && w.intact() {
		return w, r.respec(w, spec, allow)
	} else if w != nil {
		// Its sockets were removed under it: serve it anew.
		r.log.Warn("worker's sockets missing: opening it again", "worker_id", spec.WorkerID)
		if spec.ModelToken == "" {
			spec.ModelToken = w.spec().ModelToken
		}
		w.close()
		delete(r.workers, spec.WorkerID)
	}
	dir := filepath.Join(r.dir, spec.WorkerID)
	if err := makeWorkerDir(dir); err != nil {
		return nil, err
	}
	if err := writeSpec(dir, spec); err != nil {
		return nil, err
	}
	w := newWorker(r.life, spec, allow, dir, r.maxConns, r.log)
	if g, err := readGrant(dir); err != nil {
		r.log.Warn("a kept push grant is not in force", "worker_id", spec.WorkerID, "err", err)
	} else if g != nil {
		w.grant.Store(g)
	}
	if err := r.sockets.listen(w); err != nil {
		w.close()
		return nil, err
	}
	r.workers[spec.WorkerID] = w
	r.log.Info("worker opened", "worker_id", spec.WorkerID, "dir", dir)
	return w, nil
}

// respec stores the spec of open worker w, when it changed: its new
// allowlist, project and token are in force at once, its connections
// kept. A spec without a token keeps the one w has.
func (r *registry) respec(w *worker, spec WorkerSpec, allow allowlist) error {
	old := w.spec()
	if spec.ModelToken == "" {
		spec.ModelToken = old.ModelToken
	}
	if slices.Equal(old.Allow, spec.Allow) && old.ProjectID == spec.ProjectID && old.ModelToken == spec.ModelToken {
		return nil
	}
	if err := writeSpec(filepath.Join(r.dir, spec.WorkerID), spec); err != nil {
		return err
	}
	w.setSpec(spec, allow)
	r.log.Info("worker's spec changed", "worker_id", spec.WorkerID, "allow", spec.Allow, "project_id", spec.ProjectID,
		"model_token_changed", old.ModelToken != spec.ModelToken)
	return nil
}

// makeWorkerDir makes dir a directory of its own (not a link to
// elsewhere), root's, 0755 whatever the umask.
func makeWorkerDir(dir string) error {
	if err := os.Mkdir(dir, DirMode); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("gateway: %w", err)
	}
	if fi, err := os.Lstat(dir); err != nil {
		return fmt.Errorf("gateway: %w", err)
	} else if !fi.IsDir() {
		return fmt.Errorf("gateway: %s is not a directory", dir)
	}
	if err := os.Chmod(dir, DirMode); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	return nil
}

// close stops serving worker id: its listeners and every open connection
// of it are closed, and its directory removed. An unknown id is no
// error. It waits for the worker's goroutines until ctx is done.
func (r *registry) close(ctx context.Context, id string) error {
	if err := ValidID(id); err != nil {
		return err
	}
	r.mu.Lock()
	w := r.workers[id]
	delete(r.workers, id)
	if w != nil {
		w.close()
	}
	err := os.RemoveAll(filepath.Join(r.dir, id))
	r.mu.Unlock()
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	if w != nil {
		r.log.Info("worker closed", "worker_id", id)
		return w.wait(ctx)
	}
	return nil
}

// rename makes open worker from's directory, sockets and connections
// worker to's (Gateway.Rename).
func (r *registry) rename(from, to string) error {
	if err := ValidID(from); err != nil {
		return err
	}
	if err := ValidID(to); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.workers[from]
	if w == nil {
		return fmt.Errorf("gateway: worker %s is not open: %w", from, os.ErrNotExist)
	}
	if r.workers[to] != nil {
		return fmt.Errorf("gateway: worker %s is open already: %w", to, os.ErrExist)
	}
	dir := filepath.Join(r.dir, to)
	if err := os.Rename(filepath.Join(r.dir, from), dir); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	spec := w.rename(to, dir)
	delete(r.workers, from)
	r.workers[to] = w
	r.log.Info("worker renamed", "worker_id", to, "was", from)
	return writeSpec(dir, spec)
}

// get returns open worker id, or nil.
func (r *registry) get(id string) *worker {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.workers[id]
}

// spec returns the spec of open worker id.
func (r *registry) spec(id string) (WorkerSpec, bool) {
	w := r.get(id)
	if w == nil {
		return WorkerSpec{}, false
	}
	return w.spec(), true
}

// ids returns the ids of the open workers, sorted.
func (r *registry) ids() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := make([]string, 0, len(r.workers))
	for id := range r.workers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// stats returns every open worker's counters.
func (r *registry) stats() map[string]WorkerStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := make(map[string]WorkerStats, len(r.workers))
	for id, w := range r.workers {
		m[id] = w.stats.snapshot()
	}
	return m
}

// closeAll closes every worker, leaves their directories for the next
// gateway, refuses new ones, and returns them for their goroutines to be
// waited for.
func (r *registry) closeAll() []*worker {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.running = false
	var ws []*worker
	for id, w := range r.workers {
		w.close()
		ws = append(ws, w)
		delete(r.workers, id)
	}
	return ws
}
