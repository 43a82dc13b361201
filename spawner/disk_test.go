package spawner

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/testkit"
)

// diskFixture is a fixture of fake-agent workers, and the directory of
// its key prefix's disks (under a directory of the test's own).
func diskFixture(t *testing.T) (*fixture, string) {
	t.Helper()
	buildBenchBase(t)
	f := newFixture(t, useFakeAgent)
	f.startManager(t)
	return f, filepath.Join(f.s.cfg.DiskDir, f.keys.Prefix)
}

// hostFree is the free space of the filesystem that holds dir.
func hostFree(t *testing.T, dir string) int64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * st.Bsize
}

// fillResult is what the fake agent's fill mode wrote.
type fillResult struct {
	Workspace, Home, Tmp, VarTmp struct {
		Bytes int64  `json:"bytes"`
		Err   string `json:"err"`
	}
	Root string `json:"root"`
}

func (r *fillResult) UnmarshalJSON(b []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	for k, p := range map[string]any{"workspace": &r.Workspace, "home": &r.Home, "tmp": &r.Tmp, "var_tmp": &r.VarTmp, "root": &r.Root} {
		if err := json.Unmarshal(m[k], p); err != nil {
			return err
		}
	}
	return nil
}

// A worker with a disk limit writes past it in every directory it may
// write: each write is refused ENOSPC, the root filesystem is read-only,
// the host's disk loses no more than the limit, the consumer gets a
// DISK_FULL warning and the output says so; the disk goes with the
// worker. A project's disk outlives its workers and goes with its volume.
func TestDiskLimitHolds(t *testing.T) {
	for _, tc := range []struct {
		name    string
		project string
	}{
		{name: "own disk"},
		{name: "project volume", project: "disk-proj"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, dir := diskFixture(t)
			ctx := context.Background()
			spec := fakeSpec
			spec.ProjectID = tc.project
			spec.Limits.Disk = "64m"
			info, err := f.s.Create(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			if m := testkit.MountsUnder(t, dir); len(m) != 1 {
				t.Fatalf("mounts under %s: %v, want the worker's disk", dir, m)
			}
			before := hostFree(t, dir)
			f.send(t, f.keys.Input(info.WorkerID), protocol.Task{RequestID: "fill-1", Prompt: "write everything fake:fill"})
			o := f.waitOutput(t, f.keys.Output(info.WorkerID), "fill-1", 2*time.Minute)
			if o.Status != protocol.StatusComplete {
				t.Fatalf("output %+v %+v", o, o.Error)
			}
			var r fillResult
			if err := json.Unmarshal(o.Result, &r); err != nil {
				t.Fatalf("result %s: %v", o.Result, err)
			}
			total := r.Workspace.Bytes + r.Home.Bytes + r.Tmp.Bytes + r.VarTmp.Bytes
			t.Logf("written: workspace %d, home %d, tmp %d, var_tmp %d; root: %s", r.Workspace.Bytes, r.Home.Bytes, r.Tmp.Bytes, r.VarTmp.Bytes, r.Root)
			for name, e := range map[string]string{"workspace": r.Workspace.Err, "home": r.Home.Err, "tmp": r.Tmp.Err, "var_tmp": r.VarTmp.Err} {
				if !strings.Contains(e, "no space left on device") {
					t.Errorf("%s: the write past the limit ended with %q, want ENOSPC", name, e)
				}
			}
			if !strings.Contains(r.Root, "read-only file system") {
				t.Errorf("a write to /: %q, want a read-only file system", r.Root)
			}
			if r.Workspace.Bytes > 64<<20 || total > 4*64<<20 {
				t.Errorf("the agent wrote %d bytes in the workspace, %d in all, past a 64 MiB limit", r.Workspace.Bytes, total)
			}
			// Other tests write beside this one: the host may lose more
			// than the limit meanwhile, but never the 16 GiB the agent
			// tried.
			if lost := before - hostFree(t, dir); lost > 1<<30 {
				t.Errorf("the host's disk lost %d MiB while the agent filled a 64 MiB limit", lost>>20)
			}
			if o.Disk == nil || o.Disk.Code != protocol.RefusedDiskFull || o.Disk.SizeBytes > 64<<20 || o.Disk.FreeBytes > 1<<20 {
				t.Errorf("the output's disk: %+v, want DISK_FULL of at most 64 MiB with nothing free", o.Disk)
			}
			if r := f.refusal(t, info.WorkerID, "fill-1", protocol.RefusedToolDisk); r == nil || r.Code != protocol.RefusedDiskFull {
				t.Errorf("the disk's warning on the output stream: %+v, want DISK_FULL", r)
			}

			if err := f.s.Delete(ctx, info.WorkerID); err != nil {
				t.Fatal(err)
			}
			imgs, _ := filepath.Glob(filepath.Join(dir, "*", "*.img"))
			if tc.project == "" {
				if m := testkit.MountsUnder(t, dir); len(m) != 0 || len(imgs) != 0 {
					t.Fatalf("after the delete: mounts %v, disks %v; want none", m, imgs)
				}
				return
			}
			vol := ProjectVolume(f.keys.Prefix, spec.AgentType, tc.project)
			if len(imgs) != 1 || filepath.Base(imgs[0]) != vol+".img" {
				t.Fatalf("after the delete: disks %v, want the project volume's %s only", imgs, vol)
			}
			vs, err := f.s.Volumes(ctx)
			if err != nil || len(vs) != 1 || vs[0].Name != vol || vs[0].ProjectID != tc.project {
				t.Fatalf("volumes %+v (%v), want %s of project %s", vs, err, vol, tc.project)
			}
			if err := f.s.RemoveVolume(ctx, vol); err != nil {
				t.Fatal(err)
			}
			imgs, _ = filepath.Glob(filepath.Join(dir, "*", "*.img"))
			if m := testkit.MountsUnder(t, dir); len(m) != 0 || len(imgs) != 0 {
				t.Fatalf("after the volume's removal: mounts %v, disks %v; want none", m, imgs)
			}
		})
	}
}

// A spec's disk limit that is no size, or too small, is refused
// INVALID_COMMAND naming the field, before anything is made.
func TestDiskLimitRefusedWhenBad(t *testing.T) {
	u := newUnit(t, nil)
	for _, d := range []string{"lots", "0", "1m", "-5g"} {
		spec := protocol.WorkerSpec{AgentType: protocol.AgentClaude, Limits: protocol.Limits{Disk: d}}
		_, err := u.s.Create(context.Background(), spec)
		if ProtocolError(err).Code != protocol.CodeInvalidCommand || !strings.Contains(err.Error(), "limits.disk") {
			t.Errorf("disk %q: %v, want INVALID_COMMAND naming limits.disk", d, err)
		}
	}
}
