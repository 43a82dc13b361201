package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/engine"
)

// A worker's disk limit (engine.Limits.Disk) is a filesystem of its own
// of that size: a sparse file under the disks' directory, made an ext4
// filesystem and loop-mounted by the engine's process (which must be
// root and share the Docker daemon's mount namespace), whose directories
// are bound into the container as everything the worker may write:
// /workspace, /home/worker, /tmp, /var/tmp and /run/lock, over a read-only
// root. A write past the size fails with ENOSPC, from the kernel; the
// host's disk holds at most the size per worker, whatever is written.
//
// Docker's own `--storage-opt size=` would bound only the container's
// writable layer, not a volume, and only on overlay2 over xfs mounted
// with pquota, btrfs, zfs or devicemapper; overlay2 over ext4 (the common
// case) refuses it. The loop disk works on any of them.
//
// Two kinds of disk, under <dir>/<key prefix>/:
//   - instances/<id>.img, mounted at instances/<id>/: an instance's own,
//     made at Create and removed with the instance; its id (the
//     instance's name and a random suffix: a rename keeps it) is the
//     container's labelDisk;
//   - volumes/<volume>.img, mounted at volumes/<volume>/, with the
//     volume's labels in volumes/<volume>.json: a project volume's (the
//     agent's home, kept across incarnations), instead of a Docker
//     volume; the containers using it carry labelDiskVolume. It goes with
//     RemoveVolume.
//
// What a crash leaves (an instance's disk whose container is gone, a
// mount point not mounted after a reboot) is removed by Sweep or mounted
// again by the next create that needs it.

// Disk labels on a container: its own disk, and the project volume's disk
// it uses.
const (
	labelDisk       = protocol.LabelPrefix + "disk"
	labelDiskVolume = protocol.LabelPrefix + "disk_volume"
	labelDiskTmp    = protocol.LabelPrefix + "disk_tmp" // its temporary directory on the project volume's disk
)

// The directories of a disk bound into the container (the disk's
// subdirectory, the container's path). An instance disk holds the
// workspace; a project volume's holds the home, and the workspace in it
// (the wrapper's WORKSPACE, /home/worker/workspace), which is /workspace
// too.
var (
	instanceBinds = [][2]string{{"workspace", "/workspace"}, {"home", "/home/worker"}, {"tmp", "/tmp"}, {"tmp", "/var/tmp"}, {"tmp", "/run/lock"}}
)

// volumeBinds are a project volume's disk's: its temporary directories
// are the instance's own (tmp/<instance>), as a container's layer's were,
// removed with the instance, so that no incarnation finds another's.
func volumeBinds(tmp string) [][2]string {
	return [][2]string{{"home", "/home/worker"}, {"home/workspace", "/workspace"}, {tmp, "/tmp"}, {tmp, "/var/tmp"}, {tmp, "/run/lock"}}
}

// diskGrace is how old an instance's disk must be before Sweep may take
// it for a crash's leftover: its create may be in flight.
const diskGrace = 2 * time.Minute

// DefaultDiskDir is WORKER_DISK_DIR's default.
const DefaultDiskDir = "/var/lib/agentvisor/disks"

// Disks are where the engine makes the workers' disks (Engine.KeepDisks).
type Disks struct {
	// Dir is the directory of every key prefix's disks
	// (WORKER_DISK_DIR).
	Dir string
}

// disks makes, mounts and removes the disks of one key prefix.
type disks struct {
	dir   string        // <Dir>/<prefix>
	grace time.Duration // diskGrace
}

// disk is one disk made or mounted for a create: what Create binds and
// labels, and what a failed create removes.
type disk struct {
	id     string // an instance's disk id ("": a volume's)
	volume string // a volume's name ("": an instance's)
	tmp    string // on a volume's disk, the instance's temporary directory
	mnt    string
	binds  [][2]string
}

func (d *disks) instancePaths(id string) (img, mnt string) {
	return filepath.Join(d.dir, "instances", id+".img"), filepath.Join(d.dir, "instances", id)
}

func (d *disks) volumePaths(name string) (img, mnt, meta string) {
	base := filepath.Join(d.dir, "volumes", name)
	return base + ".img", base, base + ".json"
}

// forSpec makes (or mounts again) the disk of a spec with a disk limit:
// its project volume's, when it mounts one at the home, else one of its
// own. It returns nil for a spec without a disk limit.
func (d *disks) forSpec(ctx context.Context, spec engine.Spec) (*disk, error) {
	if spec.Limits.Disk <= 0 {
		return nil, nil
	}
	if d == nil {
		return nil, engine.Wrap(engine.ErrUnsupported, errors.New("a disk limit without a disk directory (KeepDisks)"))
	}
	uid, gid := userOf(spec.User)
	for _, m := range spec.Mounts {
		if m.Volume != "" && m.Target == "/home/worker" {
			return d.volume(ctx, m, spec.Limits.Disk, uid, gid, diskID(spec.Name))
		}
	}
	id := diskID(spec.Name)
	img, mnt := d.instancePaths(id)
	if err := d.make(ctx, img, mnt, spec.Limits.Disk, false, uid, gid, "workspace", "home", "tmp"); err != nil {
		d.removeFiles(img, mnt)
		return nil, err
	}
	return &disk{id: id, mnt: mnt, binds: instanceBinds}, nil
}

// volume makes a project volume's disk on its first use, and mounts it
// where it is not (a reboot, a Sweep). The disk keeps the size it was
// made with.
func (d *disks) volume(ctx context.Context, m engine.Mount, size int64, uid, gid int, instance string) (*disk, error) {
	unlock, err := d.lockVolumes()
	if err != nil {
		return nil, err
	}
	defer unlock()
	img, mnt, meta := d.volumePaths(m.Volume)
	if _, err := os.Stat(img); errors.Is(err, fs.ErrNotExist) {
		if err := d.make(ctx, img, mnt, size, true, uid, gid, "home", "home/workspace", "tmp"); err != nil {
			d.removeFiles(img, mnt)
			return nil, err
		}
		labels, _ := json.Marshal(m.Labels)
		if err := os.WriteFile(meta, labels, 0o600); err != nil {
			return nil, fmt.Errorf("disk of volume %s: %w", m.Volume, err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("disk of volume %s: %w", m.Volume, err)
	} else if err := d.mount(ctx, img, mnt); err != nil {
		return nil, err
	} else if err := makeDirs(mnt, uid, gid, "home", "home/workspace", "tmp"); err != nil { // a disk of an earlier release may lack one
		return nil, err
	}
	tmp := "tmp/" + instance
	if err := makeDirs(mnt, uid, gid, tmp); err != nil {
		return nil, err
	}
	if err := os.Chmod(filepath.Join(mnt, tmp), 0o1777); err != nil {
		return nil, fmt.Errorf("disk %s: %w", mnt, err)
	}
	return &disk{volume: m.Volume, tmp: tmp, mnt: mnt, binds: volumeBinds(tmp)}, nil
}

// diskID names an instance's disk, or its temporary directory on a
// project's: its name and a random suffix (a rename keeps it; a name used
// again gets another).
func diskID(name string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return name + "-" + hex.EncodeToString(b)
}

// removeVolumeTmp removes an instance's temporary directory from its
// project volume's disk (a disk not mounted, or gone, has none to remove).
func (d *disks) removeVolumeTmp(volume, tmp string) error {
	if d == nil || volume == "" || !strings.HasPrefix(tmp, "tmp/") || strings.ContainsAny(volume+strings.TrimPrefix(tmp, "tmp/"), "/\x00") {
		return nil
	}
	_, mnt, _ := d.volumePaths(volume)
	if !mounted(mnt) {
		return nil
	}
	return os.RemoveAll(filepath.Join(mnt, tmp))
}

// lockVolumes takes the lock of the prefix's project volume disks, a file
// lock: the managers of one engine share the directory, and two creates
// of one project's workers, on any of them, make one disk.
func (d *disks) lockVolumes() (unlock func(), err error) {
	dir := filepath.Join(d.dir, "volumes")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("disk directory: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("disk lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("disk lock: %w", err)
	}
	return func() { f.Close() }, nil // closing releases the lock
}

// make makes a sparse file of size, an ext4 filesystem on it (a journal
// for a volume's, which outlives its containers; none for an instance's),
// mounts it and makes dirs in it, owned by the worker's user (tmp:
// sticky, for everyone). No block is reserved for root: the worker gets
// the whole size, less the filesystem's own.
func (d *disks) make(ctx context.Context, img, mnt string, size int64, journal bool, uid, gid int, dirs ...string) error {
	if err := os.MkdirAll(filepath.Dir(img), 0o700); err != nil {
		return fmt.Errorf("disk directory: %w", err)
	}
	f, err := os.OpenFile(img, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("disk %s: %w", img, err)
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("disk %s: %w", img, err)
	}
	features := "^has_journal"
	if journal {
		features = "has_journal"
	}
	if err := run(ctx, "mkfs.ext4", "-q", "-F", "-m", "0", "-O", features,
		"-E", fmt.Sprintf("root_owner=%d:%d,lazy_itable_init=1,lazy_journal_init=1,nodiscard", uid, gid), img); err != nil {
		return err
	}
	if err := d.mount(ctx, img, mnt); err != nil {
		return err
	}
	return makeDirs(mnt, uid, gid, dirs...)
}

// makeDirs makes dirs on the disk mounted at mnt where they are not,
// owned by the worker's user (tmp: sticky, for everyone).
func makeDirs(mnt string, uid, gid int, dirs ...string) error {
	for _, dir := range dirs {
		p := filepath.Join(mnt, dir)
		if err := os.Mkdir(p, 0o755); errors.Is(err, fs.ErrExist) {
			continue
		} else if err != nil {
			return fmt.Errorf("disk %s: %w", mnt, err)
		}
		if err := os.Chown(p, uid, gid); err != nil {
			return fmt.Errorf("disk %s: %w", mnt, err)
		}
		if dir == "tmp" {
			if err := os.Chmod(p, 0o1777); err != nil {
				return fmt.Errorf("disk %s: %w", mnt, err)
			}
		}
	}
	return nil
}

// mount loop-mounts img at mnt unless it is mounted there already: with
// discard, what the worker deletes is given back to the host's disk (the
// file shrinks); with noinit_itable, the kernel does not zero the inode
// tables behind the worker's back (a sparse file reads as zeros already),
// which would take some 160 MiB of the host's disk for a 10g disk.
func (d *disks) mount(ctx context.Context, img, mnt string) error {
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		return fmt.Errorf("disk mount point: %w", err)
	}
	if mounted(mnt) {
		return nil
	}
	return run(ctx, "mount", "-t", "ext4", "-o", "loop,nosuid,nodev,noinit_itable,discard", img, mnt)
}

// removeInstance unmounts an instance's disk and removes it (one gone is
// no error).
func (d *disks) removeInstance(id string) error {
	if d == nil || id == "" || strings.ContainsAny(id, "/\x00") {
		return nil
	}
	img, mnt := d.instancePaths(id)
	return d.removeFiles(img, mnt)
}

// removeVolume unmounts a project volume's disk and removes it.
func (d *disks) removeVolume(name string) error {
	if d == nil || strings.ContainsAny(name, "/\x00") {
		return nil
	}
	unlock, err := d.lockVolumes()
	if err != nil {
		return err
	}
	defer unlock()
	img, mnt, meta := d.volumePaths(name)
	err = d.removeFiles(img, mnt)
	if rerr := os.Remove(meta); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) && err == nil {
		err = rerr
	}
	return err
}

// removeFiles unmounts mnt (lazily when something still holds it: the
// loop device goes with its last user) and removes it and img.
func (d *disks) removeFiles(img, mnt string) error {
	if mounted(mnt) {
		if err := syscall.Unmount(mnt, 0); err != nil {
			if err := syscall.Unmount(mnt, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
				return fmt.Errorf("unmount disk %s: %w", mnt, err)
			}
		}
	}
	if err := os.Remove(mnt); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove disk %s: %w", mnt, err)
	}
	if err := os.Remove(img); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove disk %s: %w", img, err)
	}
	return nil
}

// instances lists the instance disks and how old each is.
func (d *disks) instances() map[string]time.Time {
	out := map[string]time.Time{}
	if d == nil {
		return out
	}
	entries, _ := os.ReadDir(filepath.Join(d.dir, "instances"))
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".img")
		if !ok {
			continue
		}
		if info, err := e.Info(); err == nil {
			out[id] = info.ModTime()
		}
	}
	return out
}

// volumes lists the project volumes that have a disk, with their labels.
func (d *disks) volumes() []engine.Volume {
	if d == nil {
		return nil
	}
	var out []engine.Volume
	entries, _ := os.ReadDir(filepath.Join(d.dir, "volumes"))
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".img")
		if !ok {
			continue
		}
		v := engine.Volume{Name: name}
		_, _, meta := d.volumePaths(name)
		if b, err := os.ReadFile(meta); err == nil {
			_ = json.Unmarshal(b, &v.Labels)
		}
		out = append(out, v)
	}
	return out
}

// mounted reports whether a filesystem is mounted at p: p's device is not
// its parent's.
func mounted(p string) bool {
	var st, parent syscall.Stat_t
	if syscall.Stat(p, &st) != nil || syscall.Stat(filepath.Dir(p), &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}

// run runs a command of the host's (mkfs.ext4, mount), its output in the
// error.
func run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return engine.Wrap(engine.ErrUnavailable, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out))))
	}
	return nil
}

// userOf reads a spec's "uid:gid" (the worker's 1000:1000 when it says
// none).
func userOf(user string) (uid, gid int) {
	uid, gid = 1000, 1000
	u, g, _ := strings.Cut(user, ":")
	if n, err := strconv.Atoi(u); err == nil {
		uid, gid = n, n
	}
	if n, err := strconv.Atoi(g); err == nil {
		gid = n
	}
	return uid, gid
}

// CheckDisks makes, mounts and removes a disk under dir, as a create
// would: a manager that cannot (not root, no mkfs.ext4, no loop device)
// is told at start rather than at its first create.
func CheckDisks(ctx context.Context, dir string) error {
	if os.Geteuid() != 0 {
		return errors.New("a disk limit needs the manager to run as root on the host (it loop-mounts each worker's disk)")
	}
	d := &disks{dir: filepath.Join(dir, ".check")}
	img, mnt := d.instancePaths(fmt.Sprintf("check-%d", os.Getpid()))
	err := d.make(ctx, img, mnt, protocol.MinDiskBytes, false, 1000, 1000, "workspace")
	if rerr := d.removeFiles(img, mnt); err == nil {
		err = rerr
	}
	_ = os.Remove(filepath.Dir(img))
	_ = os.Remove(d.dir)
	return err
}
