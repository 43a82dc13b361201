package worker

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/agentvisor/agentvisor/protocol"
)

// A workspace with room is not full; one with less than 1 MiB left is,
// with its size and what is left; a worker without a disk limit looks at
// nothing. The filesystem is a 4 MiB tmpfs, as a worker's disk is a
// filesystem of its own.
func TestDiskWatchSeesAFullWorkspace(t *testing.T) {
	if w := newDiskWatch(0, t.TempDir()); len(w.paths) != 0 {
		t.Fatalf("no disk limit, yet the wrapper looks at %v", w.paths)
	}
	ws := t.TempDir()
	if err := syscall.Mount("tmpfs", ws, "tmpfs", 0, "size=4m"); err != nil {
		t.Fatalf("mount a 4 MiB tmpfs (the tests run as root, as the manager that makes the disks): %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(ws, syscall.MNT_DETACH) })
	w := newDiskWatch(4<<20, ws)
	if w.paths[0] != ws {
		t.Fatalf("paths %v, want the workspace first", w.paths)
	}
	w.paths = w.paths[:1] // the home is the test's, not a disk of its own
	if df := w.full(nil, nil); df != nil {
		t.Fatalf("an empty disk reported full: %+v", df)
	}
	f, err := os.Create(filepath.Join(ws, "fill"))
	if err != nil {
		t.Fatal(err)
	}
	block := make([]byte, 64<<10)
	for {
		if _, err = f.Write(block); err != nil {
			break
		}
	}
	f.Close()
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("the fill ended with %v, want ENOSPC", err)
	}
	df := w.full(nil, nil)
	if df == nil || df.Code != protocol.RefusedDiskFull || df.Path != ws || df.SizeBytes != 4<<20 || df.FreeBytes >= diskFullFree {
		t.Fatalf("a full disk: %+v, want DISK_FULL of the workspace, 4 MiB, under 1 MiB free", df)
	}
}
