// Package docker is the spawner's engine over one Docker engine: a
// worker's instance is a container named after it (engine.InstanceName),
// labelled with its key prefix, and a sealed worker's container gets a
// network namespace with loopback only, made ahead of time where it can
// (netns.go). It is the one package of the spawner, beside the image
// builder, that speaks Docker.
package docker

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/system"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/engine"
)

// Client is the part of the Docker client the engine uses.
type Client interface {
	ContainerCreate(ctx context.Context, config *container.Config, hostConfig *container.HostConfig, networkingConfig *network.NetworkingConfig, platform *ocispec.Platform, containerName string) (container.CreateResponse, error)
	ContainerStart(ctx context.Context, containerID string, options container.StartOptions) error
	ContainerStop(ctx context.Context, containerID string, options container.StopOptions) error
	ContainerRemove(ctx context.Context, containerID string, options container.RemoveOptions) error
	ContainerPause(ctx context.Context, containerID string) error
	ContainerUnpause(ctx context.Context, containerID string) error
	ContainerRename(ctx context.Context, containerID, newContainerName string) error
	ContainerInspect(ctx context.Context, containerID string) (container.InspectResponse, error)
	ContainerList(ctx context.Context, options container.ListOptions) ([]container.Summary, error)
	Events(ctx context.Context, options events.ListOptions) (<-chan events.Message, <-chan error)
	VolumeList(ctx context.Context, options volume.ListOptions) (volume.ListResponse, error)
	VolumeRemove(ctx context.Context, volumeID string, force bool) error
	Info(ctx context.Context) (system.Info, error)
}

var (
	_ Client        = (*client.Client)(nil)
	_ engine.Engine = (*Engine)(nil)
)

// Engine is engine.Engine over a Docker engine.
type Engine struct {
	docker Client
	prefix string // the key prefix whose containers it sees
	log    *slog.Logger

	netns *netnsPool // spare network namespaces (nil: none kept)
	disks *disks     // the workers' disks (nil: a disk limit is refused)

	mu sync.Mutex
	// pending holds each container made and not started yet by this
	// process: what Start needs to make it again should its spare
	// namespace have gone (handle.go).
	pending map[string]*handle
}

// New returns the engine of the containers of a key prefix on docker.
func New(docker Client, prefix string, log *slog.Logger) *Engine {
	if log == nil {
		log = slog.Default()
	}
	return &Engine{docker: docker, prefix: prefix, log: log, pending: map[string]*handle{}}
}

// Classify wraps a Docker error in the engine's sentinel of its kind.
func Classify(err error) error {
	var kind error
	switch {
	case err == nil:
		return nil
	case errdefs.IsNotFound(err):
		kind = engine.ErrNotFound
	case errdefs.IsConflict(err):
		kind = engine.ErrConflict
	case errdefs.IsInvalidParameter(err):
		kind = engine.ErrInvalid
	case errdefs.IsForbidden(err), errdefs.IsUnauthorized(err):
		kind = engine.ErrForbidden
	default:
		kind = engine.ErrUnavailable
	}
	return engine.Wrap(kind, err)
}

// managed selects the workers' containers of the prefix.
func (e *Engine) managed() filters.Args {
	return filters.NewArgs(filters.Arg("label", protocol.LabelManaged+"=true"),
		filters.Arg("label", protocol.LabelKeyPrefix+"="+e.prefix))
}

// Create makes a worker's container (see engine.Engine). A sealed one
// joins a spare network namespace when one is ready.
func (e *Engine) Create(ctx context.Context, spec engine.Spec) (string, error) {
	h := &handle{spec: spec}
	var err error
	if h.disk, err = e.disks.forSpec(ctx, spec); err != nil {
		return "", err
	}
	if spec.Network == engine.Sealed {
		h.holder = e.netns.take()
	}
	id, err := e.create(ctx, h)
	if err != nil {
		e.netns.release(ctx, h.holder)
		if h.disk != nil {
			_ = e.disks.removeInstance(h.disk.id) // a volume's disk stays, as a volume would, less the instance's tmp
			_ = e.disks.removeVolumeTmp(h.disk.volume, h.disk.tmp)
		}
		return "", err
	}
	e.mu.Lock()
	e.pending[id] = h
	e.mu.Unlock()
	return id, nil
}

// create makes h's container; a spare namespace whose holder went
// meanwhile (removed by hand) gives way to a namespace of its own.
func (e *Engine) create(ctx context.Context, h *handle) (string, error) {
	for {
		cfg, hc := config(h.spec, h.holder, h.disk)
		resp, err := e.docker.ContainerCreate(ctx, cfg, hc, nil, nil, h.spec.Name)
		if err != nil && errdefs.IsNotFound(err) && h.holder != "" {
			e.netns.release(ctx, h.holder)
			h.holder = ""
			continue
		}
		if err != nil {
			return "", Classify(err)
		}
		return resp.ID, nil
	}
}

// Start starts a container. One made by this process to join a spare
// namespace whose holder went before the start is made again on a
// namespace of its own and started; one that joined is given its
// namespace for good (netns.go).
func (e *Engine) Start(ctx context.Context, id string) (string, error) {
	e.mu.Lock()
	h := e.pending[id]
	delete(e.pending, id)
	e.mu.Unlock()
	err := e.docker.ContainerStart(ctx, id, container.StartOptions{})
	if err != nil && h != nil && h.holder != "" {
		e.log.Warn("a spare network namespace was gone at start: the worker gets one of its own", "container_id", id, "err", err)
		_ = e.docker.ContainerRemove(context.WithoutCancel(ctx), id, container.RemoveOptions{Force: true})
		e.netns.release(ctx, h.holder)
		h.holder = ""
		if id, err = e.create(ctx, h); err != nil {
			return id, err
		}
		err = e.docker.ContainerStart(ctx, id, container.StartOptions{})
	}
	if err != nil {
		return id, Classify(err)
	}
	if h != nil {
		e.netns.started(h.holder)
	}
	return id, nil
}

func (e *Engine) Suspend(ctx context.Context, id string) error {
	return Classify(e.docker.ContainerPause(ctx, id))
}

func (e *Engine) Resume(ctx context.Context, id string) error {
	return Classify(e.docker.ContainerUnpause(ctx, id))
}

// Suspends reports true: a container is frozen by its cgroup's freezer.
func (e *Engine) Suspends() bool { return true }

// RunsContainers reports true: a worker's container may hold rootless
// Podman (containers.go).
func (e *Engine) RunsContainers() bool { return true }

func (e *Engine) Stop(ctx context.Context, id string, grace time.Duration) error {
	timeout := int(grace.Seconds())
	return Classify(e.docker.ContainerStop(ctx, id, container.StopOptions{Timeout: &timeout}))
}

// Remove kills and removes a container (ErrNotFound: already gone); the
// spare namespace a container of this process's was to join goes with it,
// and so does its own disk.
func (e *Engine) Remove(ctx context.Context, id string) error {
	e.mu.Lock()
	h := e.pending[id]
	delete(e.pending, id)
	e.mu.Unlock()
	var labels map[string]string
	if e.disks != nil {
		if c, err := e.docker.ContainerInspect(ctx, id); err == nil && c.Config != nil {
			labels = c.Config.Labels
		}
	}
	err := e.docker.ContainerRemove(ctx, id, container.RemoveOptions{Force: true})
	for try := 0; try < 10 && err != nil && strings.Contains(err.Error(), "is zombie and can not be killed"); try++ {
		// A process of the container's gone but not reaped yet (gVisor's
		// sandbox under load reaps it a moment later): the kill and the
		// removal succeed once it is.
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
			err = e.docker.ContainerRemove(ctx, id, container.RemoveOptions{Force: true})
		}
		if ctx.Err() != nil {
			break
		}
	}
	if h != nil {
		e.netns.release(ctx, h.holder)
	}
	if err == nil || errdefs.IsNotFound(err) {
		derr := e.disks.removeInstance(labels[labelDisk])
		if terr := e.disks.removeVolumeTmp(labels[labelDiskVolume], labels[labelDiskTmp]); derr == nil {
			derr = terr
		}
		if derr != nil {
			e.log.Warn("a removed worker's disk stays (the reconciliation removes it)", "container_id", id, "err", derr)
		}
	}
	return Classify(err)
}

func (e *Engine) Rename(ctx context.Context, id, worker string) error {
	return Classify(e.docker.ContainerRename(ctx, id, engine.InstanceName(worker)))
}

// Inspect returns a container by id or name.
func (e *Engine) Inspect(ctx context.Context, ref string) (engine.Instance, error) {
	c, err := e.docker.ContainerInspect(ctx, ref)
	if err != nil {
		return engine.Instance{}, Classify(err)
	}
	in := engine.Instance{ID: c.ID, Name: strings.TrimPrefix(c.Name, "/")}
	if c.Config != nil {
		in.Labels, in.Image = c.Config.Labels, c.Config.Image
	}
	in.Worker = workerOf([]string{c.Name}, in.Labels)
	if st := c.State; st != nil {
		in.ExitCode, in.OOMKilled = st.ExitCode, st.OOMKilled
		switch {
		case st.Paused:
			in.State = engine.Suspended
		case st.Running:
			in.State = engine.Running
		default:
			in.State = state(string(st.Status))
		}
	}
	if t, err := time.Parse(time.RFC3339Nano, c.Created); err == nil {
		in.Created = t
	}
	if c.NetworkSettings != nil {
		in.IP = c.NetworkSettings.IPAddress
	}
	in.Role = in.Labels[labelRole]
	return in, nil
}

// List returns the prefix's worker containers (and its spare namespaces'
// holders with f.Spares).
func (e *Engine) List(ctx context.Context, f engine.Filter) ([]engine.Instance, error) {
	args := e.managed()
	if f.Spares { // holders carry the prefix label only
		args = filters.NewArgs(filters.Arg("label", protocol.LabelKeyPrefix+"="+e.prefix))
	}
	if f.State != "" {
		args.Add("status", string(f.State))
	}
	cs, err := e.docker.ContainerList(ctx, container.ListOptions{All: true, Filters: args})
	if err != nil {
		return nil, Classify(err)
	}
	out := make([]engine.Instance, 0, len(cs))
	for _, c := range cs {
		in := engine.Instance{ID: c.ID, Worker: workerOf(c.Names, c.Labels), Labels: c.Labels, State: state(c.State),
			Image: c.Image, Created: time.Unix(c.Created, 0), Role: c.Labels[labelRole]}
		if len(c.Names) > 0 {
			in.Name = strings.TrimPrefix(c.Names[0], "/")
		}
		out = append(out, in)
	}
	return out, nil
}

// state is a container's status as the engine's state: Docker's words
// are the engine's (created, running, paused, exited, dead, and the
// others, removing and restarting, as they are).
func state(s string) engine.State { return engine.State(s) }

// Watch follows the engine's events of the prefix's worker containers.
func (e *Engine) Watch(ctx context.Context, since time.Time) (<-chan engine.Event, <-chan error) {
	f := e.managed()
	f.Add("type", string(events.ContainerEventType))
	msgs, errs := e.docker.Events(ctx, events.ListOptions{Filters: f, Since: fmt.Sprint(since.Unix())})
	out, outErr := make(chan engine.Event), make(chan error, 1)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case err := <-errs:
				outErr <- Classify(err)
				return
			case m := <-msgs:
				ev := engine.Event{Worker: workerOf([]string{m.Actor.Attributes["name"]}, m.Actor.Attributes)}
				switch m.Action {
				case events.ActionOOM:
					ev.Kind = engine.EventOOM
				case events.ActionDie:
					ev.Kind = engine.EventDied
					_, _ = fmt.Sscan(m.Actor.Attributes["exitCode"], &ev.ExitCode)
				case events.ActionPause:
					ev.Kind = engine.EventSuspended
				case events.ActionUnPause:
					ev.Kind = engine.EventResumed
				default:
					continue
				}
				if ev.Worker == "" {
					continue
				}
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, outErr
}

// Volumes lists the prefix's project volumes: Docker's, and those that
// are disks (disks.go).
func (e *Engine) Volumes(ctx context.Context) ([]engine.Volume, error) {
	resp, err := e.docker.VolumeList(ctx, volume.ListOptions{Filters: e.managed()})
	if err != nil {
		return nil, Classify(err)
	}
	out := make([]engine.Volume, 0, len(resp.Volumes))
	seen := map[string]bool{}
	for _, v := range resp.Volumes {
		out = append(out, engine.Volume{Name: v.Name, Labels: v.Labels})
		seen[v.Name] = true
	}
	for _, v := range e.disks.volumes() {
		if !seen[v.Name] {
			out = append(out, v)
		}
	}
	return out, nil
}

// RemoveVolume removes a project volume, and its disk; a disk a container
// uses is ErrConflict, as Docker's volume in use is, unless force.
func (e *Engine) RemoveVolume(ctx context.Context, name string, force bool) error {
	if e.disks != nil && !force {
		cs, err := e.docker.ContainerList(ctx, container.ListOptions{All: true,
			Filters: filters.NewArgs(filters.Arg("label", labelDiskVolume+"="+name))})
		if err != nil {
			return Classify(err)
		}
		if len(cs) > 0 {
			return engine.Wrap(engine.ErrConflict, fmt.Errorf("volume %s is in use by container %s", name, cs[0].ID))
		}
	}
	if err := e.docker.VolumeRemove(ctx, name, force); err != nil && !errdefs.IsNotFound(err) {
		return Classify(err)
	}
	if err := e.disks.removeVolume(name); err != nil {
		return engine.Wrap(engine.ErrUnavailable, err)
	}
	return nil
}

func (e *Engine) Info(ctx context.Context) (engine.Info, error) {
	info, err := e.docker.Info(ctx)
	if err != nil {
		return engine.Info{}, Classify(err)
	}
	out := engine.Info{Name: info.Name, CPUs: info.NCPU, MemoryMax: info.MemTotal, Runtimes: []string{}}
	for name := range info.Runtimes {
		out.Runtimes = append(out.Runtimes, name)
	}
	sort.Strings(out.Runtimes)
	return out, nil
}

func (e *Engine) Prepare() { e.netns.warm() }

// Sweep removes the spare namespaces no live manager keeps, and the disks
// of instances that are gone (a manager's crash between a container's
// removal and its disk's), and says how many.
func (e *Engine) Sweep(ctx context.Context) int { return e.netns.sweep(ctx) + e.sweepDisks(ctx) }

// sweepDisks removes the instance disks, older than diskGrace, that no
// container of the prefix carries.
func (e *Engine) sweepDisks(ctx context.Context) int {
	have := e.disks.instances()
	if len(have) == 0 {
		return 0
	}
	cs, err := e.docker.ContainerList(ctx, container.ListOptions{All: true, Filters: e.managed()})
	if err != nil {
		return 0
	}
	for _, c := range cs {
		delete(have, c.Labels[labelDisk])
	}
	n := 0
	for id, made := range have {
		if time.Since(made) < e.disks.grace {
			continue
		}
		if err := e.disks.removeInstance(id); err != nil {
			e.log.Warn("sweep: a gone worker's disk stays", "disk", id, "err", err)
			continue
		}
		n++
	}
	return n
}
func (e *Engine) Close(ctx context.Context) { e.netns.close(ctx) }

// handle is what this process holds of one container it made and has not
// started yet: its spec, and the spare namespace it is to join.
type handle struct {
	spec   engine.Spec
	holder string // the spare namespace's holder ("": one of its own)
	disk   *disk  // its disk (nil: no disk limit)
}

// workerOf returns the worker a container serves: the one its name says
// (a wake backed by a warm pool renames the warm worker's container after
// the worker it wakes), else the one its label says (the worker it was
// made for). names are the engine's (with or without the leading "/").
func workerOf(names []string, labels map[string]string) string {
	for _, n := range names {
		if id, ok := strings.CutPrefix(strings.TrimPrefix(n, "/"), engine.NamePrefix); ok && id != "" {
			return id
		}
	}
	return labels[protocol.LabelWorkerID]
}

// config is a worker's container: spec's labels, environment, limits and
// mounts, and the hardening every worker gets. holder is the spare
// namespace a sealed container joins ("": one of its own); d its disk,
// whose directories are all the container may write (nil: none).
func config(spec engine.Spec, holder string, d *disk) (*container.Config, *container.HostConfig) {
	stop := int(spec.StopTimeout.Seconds())
	hc := &container.HostConfig{
		NetworkMode: container.NetworkMode(spec.Network),
		Resources: container.Resources{Memory: spec.Limits.Memory, NanoCPUs: int64(spec.Limits.CPUs * 1e9),
			PidsLimit: ptr(spec.Limits.Pids)},
		SecurityOpt: []string{"no-new-privileges"},
		CapDrop:     []string{"ALL"},
		Init:        ptr(false), // the wrapper is PID 1
		Runtime:     spec.Runtime,
	}
	if spec.Network == engine.Sealed {
		hc.NetworkMode = "none"
		if holder != "" {
			hc.NetworkMode = container.NetworkMode("container:" + holder) // a spare namespace, loopback only as well
		}
	}
	labels := spec.Labels
	if d != nil {
		labels = make(map[string]string, len(spec.Labels)+1)
		for k, v := range spec.Labels {
			labels[k] = v
		}
		if d.id != "" {
			labels[labelDisk] = d.id
		} else {
			labels[labelDiskVolume], labels[labelDiskTmp] = d.volume, d.tmp
		}
		hc.ReadonlyRootfs = true
		for _, b := range d.binds {
			hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeBind, Source: filepath.Join(d.mnt, b[0]), Target: b[1]})
		}
	}
	if spec.Containers {
		containers(spec, hc)
	}
	for _, m := range spec.Mounts {
		if d != nil && m.Volume != "" && m.Volume == d.volume {
			continue // the volume is the disk
		}
		if m.Volume != "" {
			hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeVolume, Source: m.Volume, Target: m.Target, ReadOnly: m.ReadOnly,
				VolumeOptions: &mount.VolumeOptions{Labels: m.Labels}})
			continue
		}
		hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeBind, Source: m.HostPath, Target: m.Target, ReadOnly: m.ReadOnly})
	}
	return &container.Config{Image: spec.Image, Env: spec.Env, Labels: labels, User: spec.User, StopTimeout: &stop}, hc
}

func ptr[T any](v T) *T { return &v }

// Spares are the spare network namespaces the engine keeps for sealed
// workers (netns.go).
type Spares struct {
	Count     int           // how many are kept ready (0: none; each sealed worker gets a new namespace)
	Image     func() string // the image holders run (the worker base image)
	ManagerID string        // the manager whose spares they are
	Host      func() string // this host's id, a holder's label
	// MarkTTL is how long a spare's mark lasts unless renewed (a dead
	// manager's spares go within one).
	MarkTTL time.Duration
	Marks   Marks
}

// Marks records in Redis which holders a live manager keeps spare.
type Marks interface {
	MarkSpareNetns(ctx context.Context, ids []string, ttl time.Duration) error
	SpareNetnsMarked(ctx context.Context, ids []string) (map[string]bool, error)
}

// KeepSpares makes the engine keep spare network namespaces for sealed
// workers; call it once, before the first Create.
func (e *Engine) KeepSpares(s Spares) {
	e.netns = newNetnsPool(netnsParams{docker: e.docker, image: s.Image, prefix: e.prefix, managerID: s.ManagerID, host: s.Host,
		spare: s.Count, settle: netnsSettle, markTTL: s.MarkTTL, log: e.log, mark: s.Marks.MarkSpareNetns, marked: s.Marks.SpareNetnsMarked})
}

// KeepDisks makes the engine give each worker with a disk limit a disk
// of its own under d.Dir (disks.go); call it once, before the first
// Create.
func (e *Engine) KeepDisks(d Disks) {
	e.disks = &disks{dir: filepath.Join(d.Dir, e.prefix), grace: diskGrace}
}

// SparesReady returns how many spare namespaces are ready.
func (e *Engine) SparesReady() int { return e.netns.ready() }

// SparesSettled reports whether the spares are at rest: every one ready,
// none waiting to go, no refill under way.
func (e *Engine) SparesSettled() bool { return e.netns.settled() }
