package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// What the gateway keeps on disk of a worker: its directory under
// Config.Dir, named by its id, and the spec the manager gave, read back
// when a gateway starts again.

// Names of the files of Config.Dir and of each worker's directory.
const (
	ControlSocket = "control.sock"
	RedisSocket   = "redis.sock"
	ModelSocket   = "model.sock"
	EgressSocket  = "egress.sock"
	WorkerFile    = "worker.json"
)

// DefaultWorkerUID is Config.WorkerUID when it is 0: the uid the worker
// images run as.
const DefaultWorkerUID = 1000

// Modes of what the gateway makes: the worker's directory is for the
// container's uid to traverse; its sockets are the container's uid's
// (Config.WorkerUID) and root's alone, so that another user of the host
// cannot use a worker's sockets (and the credentials the gateway adds to
// its egress); the control socket and worker.json are root's alone.
const (
	DirMode           os.FileMode = 0o755
	WorkerSocketMode  os.FileMode = 0o600
	ControlSocketMode os.FileMode = 0o600
	WorkerFileMode    os.FileMode = 0o600
)

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

// SpecError is a WorkerSpec the gateway refuses (a bad allowlist entry):
// the control API answers it 400, where a failure of the gateway's own is
// 500.
type SpecError struct{ Err error }

func (e *SpecError) Error() string { return e.Err.Error() }
func (e *SpecError) Unwrap() error { return e.Err }

// checkSpec parses spec's allowlist and checks its project, or returns a
// *SpecError.
func checkSpec(spec WorkerSpec) (allowlist, error) {
	allow, err := parseAllow(spec.Allow)
	if err != nil {
		return nil, &SpecError{err}
	}
	if err := validProject(spec.ProjectID); err != nil {
		return nil, &SpecError{err}
	}
	return allow, nil
}

// validProject reports why p cannot be a worker's project id, or nil: at
// most 256 printable ASCII characters ("" is no project).
func validProject(p string) error {
	if len(p) > 256 || printable(p) != p {
		return fmt.Errorf("gateway: project_id %q: want at most 256 printable ASCII characters, no spaces", printable(p))
	}
	return nil
}

// writeSpec writes dir/worker.json whole.
func writeSpec(dir string, spec WorkerSpec) error { return writeJSONFile(dir, WorkerFile, spec) }

// writeJSONFile writes v as dir/name whole (a temporary file renamed),
// root's alone (WorkerFileMode).
func writeJSONFile(dir, name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, "."+name+".tmp")
	if err := os.WriteFile(tmp, b, WorkerFileMode); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("gateway: %w", err)
	}
	return nil
}

// errNoSpec is a worker directory without a worker.json: not a worker's.
var errNoSpec = errors.New("gateway: no " + WorkerFile)

// readSpec reads the worker.json of the directory of worker id.
func readSpec(dir, id string) (WorkerSpec, error) {
	var spec WorkerSpec
	b, err := os.ReadFile(filepath.Join(dir, WorkerFile))
	if errors.Is(err, os.ErrNotExist) {
		return spec, errNoSpec
	}
	if err != nil {
		return spec, err
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		return spec, err
	}
	if spec.WorkerID != id {
		return spec, fmt.Errorf("worker_id %q in the directory of %q", spec.WorkerID, id)
	}
	return spec, nil
}

// printable replaces what is not printable ASCII in s: what a container
// or a file sends is logged and echoed through it.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x21 || r > 0x7e {
			return '?'
		}
		return r
	}, s)
}
