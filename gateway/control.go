package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// The control API, HTTP over Dir/control.sock:
//
//	PUT    /workers/{id}  body {"worker_id": id, "allow": [...], "project_id": p}: open (idempotent) → 200 WorkerInfo
//	GET    /workers/{id}  → 200 WorkerInfo (the allowlist in force), 404 for a worker not open
//	DELETE /workers/{id}  close: listeners, open connections, directory (idempotent) → 204
//	POST   /workers/{id}/rename  body {"to": id2}: the worker becomes id2 (its directory renamed) → 200 WorkerInfo, 404, 409
//	GET    /workers       → 200 {"workers": [id, ...]}
//	GET    /stats         → 200 {"workers": {id: WorkerStats}}
//
// Errors are {"error": "..."} with 400 (a bad id, body or allowlist
// entry), 404, 405, or 500.

// WorkerInfo is the answer to PUT and GET /workers/{id}: where the
// worker's sockets are, and its egress allowlist.
type WorkerInfo struct {
	WorkerID     string   `json:"worker_id"`
	Dir          string   `json:"dir"`
	RedisSocket  string   `json:"redis_socket"`
	ModelSocket  string   `json:"model_socket,omitempty"`
	EgressSocket string   `json:"egress_socket"`
	Allow        []string `json:"allow"`         // the worker's own list, as PUT gave it
	DefaultAllow []string `json:"default_allow"` // the operator's (Config.Allow), for every worker
	// EgressAllow is the allowlist in force on egress.sock: DefaultAllow
	// and Allow, without repeats.
	EgressAllow []string `json:"egress_allow"`
	ProjectID   string   `json:"project_id,omitempty"`
	// CredentialHosts are the hosts the gateway has a credential for,
	// for this worker: the agent reaches them as http://host/ (the
	// gateway adds the credential and speaks HTTPS upstream). Names
	// only, never a secret.
	CredentialHosts []string `json:"credential_hosts"`
}

// maxBody bounds a request body of the control API.
const maxBody = 1 << 20

// workerDirectory is the open workers, as the control API asks of them.
type workerDirectory interface {
	open(spec WorkerSpec) error
	close(ctx context.Context, id string) error
	rename(from, to string) error
	spec(id string) (WorkerSpec, bool)
	ids() []string
	stats() map[string]WorkerStats
}

// credentialHosts names the hosts with a credential for a worker.
type credentialHosts interface {
	hosts(id, project string) []string
}

// controlAPI serves the control API on control.sock, for the worker
// manager (root only).
type controlAPI struct {
	dir          string   // Config.Dir
	defaultAllow []string // Config.Allow, as given
	model        bool     // whether workers have a model.sock
	workers      workerDirectory
	creds        credentialHosts
	log          *slog.Logger

	srv  *http.Server
	path string        // control.sock, removed at stop
	done chan struct{} // closed when the server returns
}

// controlParams are what the control API is built from.
type controlParams struct {
	dir          string
	defaultAllow []string
	model        bool
	workers      workerDirectory
	creds        credentialHosts
	log          *slog.Logger
}

func newControlAPI(p controlParams) *controlAPI {
	c := &controlAPI{dir: p.dir, defaultAllow: slices.Clone(p.defaultAllow), model: p.model, workers: p.workers,
		creds: p.creds, log: p.log, done: make(chan struct{})}
	c.srv = &http.Server{Handler: c.handler(), ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(p.log.Handler(), slog.LevelWarn)}
	return c
}

// start listens on control.sock and serves it until stop.
func (c *controlAPI) start() error {
	l, err := listenUnix(c.dir, c.dir, ControlSocket, ControlSocketMode, -1)
	if err != nil {
		return fmt.Errorf("gateway: control socket: %w", err)
	}
	c.path = l.path
	go func() {
		defer close(c.done)
		if err := c.srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			c.log.Error("control socket", "err", err)
		}
	}()
	return nil
}

// stop lets the requests under way finish until ctx is done, and removes
// control.sock.
func (c *controlAPI) stop(ctx context.Context) error {
	if c.path == "" {
		return nil // never started
	}
	err := c.srv.Shutdown(ctx)
	_ = os.Remove(c.path)
	select {
	case <-c.done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	return err
}

func (c *controlAPI) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /workers/{id}", c.putWorker)
	mux.HandleFunc("DELETE /workers/{id}", c.deleteWorker)
	mux.HandleFunc("GET /workers/{id}", c.getWorker)
	mux.HandleFunc("POST /workers/{id}/rename", c.renameWorker)
	mux.HandleFunc("GET /workers", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string][]string{"workers": c.workers.ids()})
	})
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]map[string]WorkerStats{"workers": c.workers.stats()})
	})
	return mux
}

func (c *controlAPI) putWorker(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := ValidID(id); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	var spec WorkerSpec
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		writeError(w, http.StatusBadRequest, fmt.Errorf("gateway: read body: %w", err))
		return
	}
	if len(body) > 0 {
		if err := json.Unmarshal(body, &spec); err != nil {
			writeError(w, http.StatusBadRequest, fmt.Errorf("gateway: body: want {\"worker_id\": ..., \"allow\": [...]}: %w", err))
			return
		}
	}
	if spec.WorkerID != "" && spec.WorkerID != id {
		writeError(w, http.StatusBadRequest, fmt.Errorf("gateway: body's worker_id %q is not the path's %q", spec.WorkerID, id))
		return
	}
	spec.WorkerID = id
	if spec.Allow == nil {
		spec.Allow = []string{}
	}
	// A bad allowlist entry or project is a *SpecError: 400.
	if err := c.workers.open(spec); err != nil {
		status := http.StatusInternalServerError
		if _, ok := errors.AsType[*SpecError](err); ok {
			status = http.StatusBadRequest
		}
		writeError(w, status, err)
		return
	}
	writeJSON(w, http.StatusOK, c.info(spec))
}

func (c *controlAPI) renameWorker(w http.ResponseWriter, r *http.Request) {
	var body struct {
		To string `json:"to"`
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err == nil {
		err = json.Unmarshal(b, &body)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, fmt.Errorf("gateway: body: want {\"to\": ...}: %v", err))
		return
	}
	switch err := c.workers.rename(r.PathValue("id"), body.To); {
	case err == nil:
		spec, _ := c.workers.spec(body.To)
		writeJSON(w, http.StatusOK, c.info(spec))
	case errors.Is(err, os.ErrNotExist):
		writeError(w, http.StatusNotFound, err)
	case errors.Is(err, os.ErrExist):
		writeError(w, http.StatusConflict, err)
	default:
		if ValidID(r.PathValue("id")) != nil || ValidID(body.To) != nil {
			writeError(w, http.StatusBadRequest, err)
			return
		}
		writeError(w, http.StatusInternalServerError, err)
	}
}

func (c *controlAPI) getWorker(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := ValidID(id); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	spec, ok := c.workers.spec(id)
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Errorf("gateway: worker %s is not open", id))
		return
	}
	writeJSON(w, http.StatusOK, c.info(spec))
}

// info is what the control API says of a worker of that spec.
func (c *controlAPI) info(spec WorkerSpec) WorkerInfo {
	dir := filepath.Join(c.dir, spec.WorkerID)
	info := WorkerInfo{WorkerID: spec.WorkerID, Dir: dir, RedisSocket: filepath.Join(dir, RedisSocket),
		EgressSocket: filepath.Join(dir, EgressSocket), Allow: slices.Clone(spec.Allow), DefaultAllow: slices.Clone(c.defaultAllow)}
	if info.Allow == nil {
		info.Allow = []string{}
	}
	if info.DefaultAllow == nil {
		info.DefaultAllow = []string{}
	}
	info.EgressAllow = []string{}
	for _, e := range append(slices.Clone(info.DefaultAllow), info.Allow...) {
		if !slices.Contains(info.EgressAllow, e) {
			info.EgressAllow = append(info.EgressAllow, e)
		}
	}
	info.ProjectID = spec.ProjectID
	info.CredentialHosts = c.creds.hosts(spec.WorkerID, spec.ProjectID)
	if c.model {
		info.ModelSocket = filepath.Join(dir, ModelSocket)
	}
	return info
}

func (c *controlAPI) deleteWorker(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := ValidID(id); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	// The connections' goroutines end at once (their sockets are closed);
	// the answer waits for them a little, not for ever.
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	if err := c.workers.close(ctx, id); err != nil {
		writeError(w, http.StatusInternalServerError, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, err error) {
	if err == nil {
		err = errors.New(http.StatusText(status))
	}
	writeJSON(w, status, map[string]string{"error": err.Error()})
}
