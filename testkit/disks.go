package testkit

import (
	"os"
	"strings"
	"syscall"
	"testing"
)

// MountsUnder lists the mount points under dir (a manager's disk
// directory: one loop-mounted disk per worker and project volume).
func MountsUnder(t testing.TB, dir string) []string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			out = append(out, f[4])
		}
	}
	return out
}

// TempDiskDir is a disk directory (WORKER_DISK_DIR) of the test's own:
// what is mounted under it at the test's end is unmounted, after the
// cleanups registered later (the workers' containers removed) and before
// the directory goes.
func TempDiskDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	t.Cleanup(func() {
		for _, m := range MountsUnder(t, dir) {
			_ = syscall.Unmount(m, syscall.MNT_DETACH)
		}
	})
	return dir
}
