package docker

import (
	"context"
	"path/filepath"
	"testing"
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
