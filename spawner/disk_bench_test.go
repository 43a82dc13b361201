package spawner

import (
	"context"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/testkit"
)

// BenchmarkDiskCreate: create → the wrapper's started event of a worker
// with the default disk limit (WORKER_DISK_LIMIT, 10g: a sparse file made
// ext4 and loop-mounted, bound over a read-only root) against the same
// without one, alternating, in the same run; and what a fresh disk takes
// of the host's disk.
func BenchmarkDiskCreate(b *testing.B) {
	disk := newFixture(b, nil)
	dir := disk.s.cfg.DiskDir
	none := newFixture(b, func(c *Config) { c.DiskLimit = 0 })
	if disk.s.cfg.DiskLimit != 10<<30 {
		b.Fatalf("the default disk limit is %d, want 10g", disk.s.cfg.DiskLimit)
	}
	ctx := context.Background()
	spec := protocol.WorkerSpec{AgentType: protocol.AgentClaude}
	var used []float64
	startOf := func(f *fixture) float64 {
		for _, x := range []*fixture{disk, none} {
			testkit.Eventually(b, "the spare namespaces", time.Minute, x.s.dockerEngine().SparesSettled)
		}
		info, ms := f.timedCreate(b, spec)
		if f == disk {
			imgs, _ := filepath.Glob(filepath.Join(dir, f.keys.Prefix, "instances", "*.img"))
			var st syscall.Stat_t
			if len(imgs) != 1 || syscall.Stat(imgs[0], &st) != nil {
				b.Fatalf("the worker's disk: %v", imgs)
			}
			used = append(used, float64(st.Blocks*512)/(1<<20))
		}
		if err := f.s.Delete(ctx, info.WorkerID); err != nil {
			b.Fatal(err)
		}
		return ms
	}
	disk.s.engine.Prepare() // as a manager does at its start
	none.s.engine.Prepare()
	startOf(disk) // images built, caches warm
	startOf(none)
	var d, n []float64
	for i := 0; i < 15; i++ {
		d = append(d, startOf(disk))
		n = append(n, startOf(none))
	}
	b.ReportMetric(median(d), "disk-create-to-started-median-ms")
	b.ReportMetric(median(n), "nodisk-create-to-started-median-ms")
	b.ReportMetric(median(d)/median(n), "disk-create-ratio")
	b.ReportMetric(median(used), "disk-fresh-host-MB")
}
