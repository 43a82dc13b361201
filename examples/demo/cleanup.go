package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	dockerclient "github.com/docker/docker/client"

	"github.com/agentvisor/agentvisor/protocol"
	dockerengine "github.com/agentvisor/agentvisor/spawner/engine/docker"
)

// The demo's end: the manager's shutdown, and what no run may leave behind.

// shutDown stops the worker-manager with SIGTERM and checks that it left
// no container behind.
func (d *demo) shutDown(ctx context.Context, manager *exec.Cmd) error {
	d.tl.section("clean-up")
	d.tl.say("worker-manager: SIGTERM (it hibernates its long-lived workers and removes the others: no container is left)")
	t0 := time.Now()
	_ = manager.Process.Signal(syscall.SIGTERM)
	if err := manager.Wait(); err != nil {
		return fmt.Errorf("the worker-manager did not shut down cleanly (%v); its log: %s", err, d.logPath())
	}
	// The last lifecycle events reach the timeline (not ctx: the manager is
	// gone, what is left is to count).
	time.Sleep(300 * time.Millisecond)
	left, err := cleanUp(ctx, d.keys)
	if err != nil {
		return err
	}
	d.tl.say("worker-manager stopped in %.1fs; %d worker containers left, project volumes removed", time.Since(t0).Seconds(), left)
	if left != 0 {
		return fmt.Errorf("%d containers left behind", left)
	}
	return d.tl.block(func(w io.Writer) error {
		_, err := fmt.Fprintf(w, "\ndemo complete in %.0fs. The manager's log: %s\n", time.Since(d.tl.start).Seconds(), d.logPath())
		return err
	})
}

// cleanUp counts the demo's worker containers left and removes the
// project volumes the workers kept their sessions in.
func cleanUp(ctx context.Context, keys protocol.Keys) (int, error) {
	dc, err := dockerclient.NewClientWithOpts(dockerclient.FromEnv, dockerclient.WithAPIVersionNegotiation())
	if err != nil {
		return 0, err
	}
	defer dc.Close()
	f := filters.NewArgs(filters.Arg("label", protocol.LabelManaged+"=true"), filters.Arg("label", protocol.LabelKeyPrefix+"="+keys.Prefix))
	cs, err := dc.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return 0, err
	}
	// Every project volume of the demo's key prefix, whatever its project:
	// Docker's, and the disks (the manager's WORKER_DISK_DIR, read from
	// the same environment), as the engine lists them.
	eng := dockerengine.New(dc, keys.Prefix, nil)
	eng.KeepDisks(dockerengine.Disks{Dir: cmp.Or(os.Getenv("WORKER_DISK_DIR"), dockerengine.DefaultDiskDir)})
	vs, err := eng.Volumes(ctx)
	if err != nil {
		return len(cs), err
	}
	for _, v := range vs {
		if err := eng.RemoveVolume(ctx, v.Name, true); err != nil {
			return len(cs), err
		}
	}
	return len(cs), nil
}
