package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/engine"
	"github.com/agentvisor/agentvisor/testkit"
)

// The manager's check at start makes a disk, mounts it and leaves
// nothing behind.
func TestCheckDisksLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	if err := CheckDisks(context.Background(), dir); err != nil {
		t.Fatal(err)
	}
	left, _ := filepath.Glob(filepath.Join(dir, "*"))
	hidden, _ := filepath.Glob(filepath.Join(dir, ".*"))
	if len(left)+len(hidden) != 0 {
		t.Fatalf("left under the disk directory: %v %v", left, hidden)
	}
}

// On the real engine: a container's disk is made at Create and goes with
// Remove; one whose container was removed behind the engine's back goes
// at the next Sweep; a project volume's disk outlives its container, is
// listed as a volume, and RemoveVolume refuses it while a container uses
// it, then removes it.
func TestDisksGoWithTheirContainersAndVolumes(t *testing.T) {
	testkit.WorkerImages(t)
	dc, err := Dial(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	prefix := fmt.Sprintf("dk%d", time.Now().UnixNano())
	testkit.CleanupLabelled(t, testkit.KeyPrefixLabel(prefix))
	dir := testkit.TempDiskDir(t)
	e := New(dc, prefix, slog.New(slog.NewTextHandler(io.Discard, nil)))
	e.KeepDisks(Disks{Dir: dir})
	ctx := context.Background()
	spec := func(worker string, mounts ...engine.Mount) engine.Spec {
		return engine.Spec{Name: engine.InstanceName(worker), Image: testkit.WorkerBaseImage(), User: "1000:1000", Network: "none",
			Labels: map[string]string{protocol.LabelManaged: "true", protocol.LabelKeyPrefix: prefix, protocol.LabelWorkerID: worker},
			Limits: engine.Limits{Disk: 32 << 20}, Mounts: mounts}
	}
	disks := func() []string {
		imgs, _ := filepath.Glob(filepath.Join(dir, prefix, "*", "*.img"))
		return append(imgs, testkit.MountsUnder(t, dir)...)
	}

	id, err := e.Create(ctx, spec(prefix+"-a"))
	if err != nil {
		t.Fatal(err)
	}
	if d := disks(); len(d) != 2 {
		t.Fatalf("after the create: %v, want the container's disk and its mount", d)
	}
	if err := e.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	if d := disks(); len(d) != 0 {
		t.Fatalf("after the remove: %v left", d)
	}

	id, err = e.Create(ctx, spec(prefix+"-b"))
	if err != nil {
		t.Fatal(err)
	}
	if err := dc.ContainerRemove(ctx, id, container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	if n := e.Sweep(ctx); n != 0 || len(disks()) != 2 {
		t.Fatalf("a sweep within the grace removed %d, left %v: the disk of a create in flight goes", n, disks())
	}
	e.disks.grace = 0
	if n := e.Sweep(ctx); n != 1 || len(disks()) != 0 {
		t.Fatalf("the sweep removed %d, left %v; want the gone container's disk removed", n, disks())
	}

	vol := "agentvisor-claude-dk-" + prefix
	id, err = e.Create(ctx, spec(prefix+"-c", engine.Mount{Volume: vol, Target: "/home/worker", Labels: map[string]string{"k": "v"}}))
	if err != nil {
		t.Fatal(err)
	}
	vs, err := e.Volumes(ctx)
	if err != nil || len(vs) != 1 || vs[0].Name != vol || vs[0].Labels["k"] != "v" {
		t.Fatalf("volumes %+v (%v), want the project's disk with its labels", vs, err)
	}
	if err := e.RemoveVolume(ctx, vol, false); !errors.Is(err, engine.ErrConflict) {
		t.Fatalf("removing a volume in use: %v, want ErrConflict", err)
	}
	if err := e.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	if d := disks(); len(d) != 2 {
		t.Fatalf("after its container's removal: %v, want the project's disk kept", d)
	}
	if tmps, _ := filepath.Glob(filepath.Join(dir, prefix, "volumes", vol, "tmp", "*")); len(tmps) != 0 {
		t.Fatalf("the removed container's temporary directories stay on the project's disk: %v", tmps)
	}
	// A reboot: the disk's file is there, its mount is not. The next
	// create mounts it again, with what the project wrote.
	mnt := filepath.Join(dir, prefix, "volumes", vol)
	if err := os.WriteFile(filepath.Join(mnt, "home", "kept"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Unmount(mnt, 0); err != nil {
		t.Fatal(err)
	}
	id, err = e.Create(ctx, spec(prefix+"-d", engine.Mount{Volume: vol, Target: "/home/worker"}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(mnt, "home", "kept")); err != nil || !mounted(mnt) {
		t.Fatalf("the project's disk after a reboot and a create: mounted %v, its file: %v", mounted(mnt), err)
	}
	if err := e.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := e.RemoveVolume(ctx, vol, false); err != nil {
		t.Fatal(err)
	}
	if d := disks(); len(d) != 0 {
		t.Fatalf("after the volume's removal: %v left", d)
	}
}
