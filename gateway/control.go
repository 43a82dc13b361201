package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

func (g *Gateway) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /workers/{id}", g.putWorker)
	mux.HandleFunc("DELETE /workers/{id}", g.deleteWorker)
	mux.HandleFunc("GET /workers/{id}", g.getWorker)
	mux.HandleFunc("POST /workers/{id}/rename", g.renameWorker)
	mux.HandleFunc("GET /workers", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string][]string{"workers": g.Workers()})
	})
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]map[string]WorkerStats{"workers": g.Stats()})
	})
	return mux
}

func (g *Gateway) putWorker(w http.ResponseWriter, r *http.Request) {
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
	if err := ParseAllow(spec.Allow); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	if err := validProject(spec.ProjectID); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	if err := g.Open(spec); err != nil {
		status := http.StatusInternalServerError
		if _, ok := errors.AsType[*SpecError](err); ok {
			status = http.StatusBadRequest
		}
		writeError(w, status, err)
		return
	}
	writeJSON(w, http.StatusOK, g.info(spec))
}

func (g *Gateway) renameWorker(w http.ResponseWriter, r *http.Request) {
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
	switch err := g.Rename(r.PathValue("id"), body.To); {
	case err == nil:
		spec, _ := g.Worker(body.To)
		writeJSON(w, http.StatusOK, g.info(spec))
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

func (g *Gateway) getWorker(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := ValidID(id); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	spec, ok := g.Worker(id)
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Errorf("gateway: worker %s is not open", id))
		return
	}
	writeJSON(w, http.StatusOK, g.info(spec))
}

// Worker returns the spec of open worker id.
func (g *Gateway) Worker(id string) (WorkerSpec, bool) {
	g.mu.Lock()
	wk := g.workers[id]
	g.mu.Unlock()
	if wk == nil {
		return WorkerSpec{}, false
	}
	return wk.spec(), true
}

// info is what the control API says of a worker of that spec.
func (g *Gateway) info(spec WorkerSpec) WorkerInfo {
	dir := filepath.Join(g.cfg.Dir, spec.WorkerID)
	info := WorkerInfo{WorkerID: spec.WorkerID, Dir: dir, RedisSocket: filepath.Join(dir, RedisSocket),
		EgressSocket: filepath.Join(dir, EgressSocket), Allow: slices.Clone(spec.Allow), DefaultAllow: slices.Clone(g.cfg.Allow)}
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
	info.CredentialHosts = g.credentials().hosts(spec.WorkerID, spec.ProjectID)
	if g.cfg.Model != "" {
		info.ModelSocket = filepath.Join(dir, ModelSocket)
	}
	return info
}

func (g *Gateway) deleteWorker(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := ValidID(id); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	// The connections' goroutines end at once (their sockets are closed);
	// the answer waits for them a little, not for ever.
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	if err := g.Close(ctx, id); err != nil {
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
