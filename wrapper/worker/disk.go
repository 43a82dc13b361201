package worker

import (
	"fmt"
	"os"
	"syscall"

	"github.com/agentvisor/agentvisor/protocol"
)

// A worker with a disk limit (WORKER_DISK_LIMIT) writes on a filesystem
// of that size, which the kernel bounds: a write past it fails ENOSPC.
// The agent may not say so, or not be believed; the wrapper looks after
// each task, and a task that left the disk full gets a DISK_FULL warning
// and its output's disk.

// diskFullFree is what a full disk has left at most.
const diskFullFree = 1 << 20

// diskWatch looks at the filesystems of the workspace and the home.
type diskWatch struct {
	paths []string // none: no disk limit
}

func newDiskWatch(limit int64, workspace string) diskWatch {
	if limit <= 0 {
		return diskWatch{}
	}
	paths := []string{workspace}
	if home, err := os.UserHomeDir(); err == nil && home != workspace {
		paths = append(paths, home)
	}
	return diskWatch{paths: paths}
}

// full returns the first of the disk's directories whose filesystem has
// less than diskFullFree left, and publishes its warning as a refusal of
// cur's; nil when there is room, or no limit.
func (d diskWatch) full(cur *current, pub *publisher) *protocol.DiskFull {
	for _, p := range d.paths {
		var st syscall.Statfs_t
		if syscall.Statfs(p, &st) != nil {
			continue
		}
		free := int64(st.Bavail) * st.Bsize
		if free >= diskFullFree {
			continue
		}
		df := &protocol.DiskFull{Code: protocol.RefusedDiskFull, Path: p, SizeBytes: int64(st.Blocks) * st.Bsize, FreeBytes: free}
		if cur != nil && pub != nil {
			pub.refusal(cur, protocol.RefusedToolDisk, p, fmt.Sprintf("the worker's disk is full (%d of %d bytes free): writes past its limit fail with ENOSPC", free, df.SizeBytes), protocol.RefusedDiskFull)
		}
		return df
	}
	return nil
}
