package docker

import (
	"context"
	"log/slog"
	"time"

	"github.com/docker/docker/api/types/system"
	"github.com/docker/docker/client"
)

// Dial returns a client of the Docker engine the environment names
// (DOCKER_HOST, or the default socket), its API version negotiated now:
// the client negotiates lazily otherwise, and that races between
// goroutines.
func Dial(ctx context.Context) (*client.Client, error) {
	dc, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, err
	}
	dc.NegotiateAPIVersion(ctx)
	return dc, nil
}

// WarnIfNoLiveRestore logs a warning when the engine runs without
// live-restore: a restart of dockerd would stop every worker's container.
func WarnIfNoLiveRestore(ctx context.Context, dc interface {
	Info(context.Context) (system.Info, error)
}, log *slog.Logger) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	i, err := dc.Info(cctx)
	if err != nil || i.LiveRestoreEnabled {
		return
	}
	log.Warn("the Docker engine runs without live-restore: a restart of dockerd stops every worker's container (each worker then starts again as a new incarnation, its task in flight answered); "+
		"start dockerd with --live-restore (or \"live-restore\": true in daemon.json), as scripts/setup.sh does", "engine", i.Name)
}

// WarnIfNoRuntime logs an error when the engine lacks the runtime name
// that the manager's workers run in (WORKER_RUNTIME=gvisor: every create
// is answered RUNTIME_UNAVAILABLE until it is registered). The manager
// starts anyway: an operator may register it while the manager runs.
func WarnIfNoRuntime(ctx context.Context, dc interface {
	Info(context.Context) (system.Info, error)
}, name string, log *slog.Logger) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	i, err := dc.Info(cctx)
	if err != nil {
		return
	}
	if _, ok := i.Runtimes[name]; ok {
		return
	}
	log.Error("the workers run in gVisor (WORKER_RUNTIME=gvisor) and the Docker engine has no runtime "+name+" (WORKER_GVISOR_RUNTIME): creates are answered RUNTIME_UNAVAILABLE until it does; "+
		"run `make setup`, or add runsc to the runtimes of /etc/docker/daemon.json with the runtimeArgs --network=none and --host-uds=open and reload dockerd", "engine", i.Name, "runtime", name)
}
