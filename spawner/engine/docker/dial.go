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
