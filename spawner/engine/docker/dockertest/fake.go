// Package dockertest is an in-memory Docker engine for the unit tests of
// the spawner's decisions and of the Docker engine over it.
package dockertest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/system"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/errdefs"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Fake is an in-memory Docker engine for unit tests of the decision
// logic: containers by name with a state, and the calls made.
type Fake struct {
	mu         sync.Mutex
	containers map[string]*fakeContainer // by name
	calls      []string
}

type fakeContainer struct {
	id, name, state string
	labels          map[string]string
	created         time.Time
	exitCode        int
}

// New returns an engine with no containers.
func New() *Fake { return &Fake{containers: map[string]*fakeContainer{}} }

// Add puts a container in state into the engine.
func (d *Fake) Add(name, state string, labels map[string]string, created time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := &fakeContainer{id: "cid-" + name, name: name, state: state, labels: labels, created: created}
	d.containers[name] = c
}

func (d *Fake) get(ref string) (*fakeContainer, error) {
	for _, c := range d.containers {
		if c.name == ref || c.id == ref {
			return c, nil
		}
	}
	return nil, errdefs.NotFound(fmt.Errorf("no such container: %s", ref))
}

func (d *Fake) call(op, ref string) {
	d.calls = append(d.calls, op+" "+ref)
}

func (d *Fake) ContainerCreate(_ context.Context, cfg *container.Config, _ *container.HostConfig, _ *network.NetworkingConfig, _ *ocispec.Platform, name string) (container.CreateResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.call("create", name)
	if name == "" { // the engine names it
		name = fmt.Sprintf("anonymous-%d", len(d.calls))
	}
	if _, ok := d.containers[name]; ok {
		return container.CreateResponse{}, errdefs.Conflict(fmt.Errorf("name %s in use", name))
	}
	c := &fakeContainer{id: "cid-" + name, name: name, state: "created", labels: cfg.Labels, created: time.Now()}
	d.containers[name] = c
	return container.CreateResponse{ID: c.id}, nil
}

func (d *Fake) setState(ref, op, state string, from ...string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.call(op, ref)
	c, err := d.get(ref)
	if err != nil {
		return err
	}
	c.state = state
	return nil
}

func (d *Fake) ContainerStart(_ context.Context, id string, _ container.StartOptions) error {
	return d.setState(id, "start", "running")
}
func (d *Fake) ContainerStop(_ context.Context, id string, _ container.StopOptions) error {
	return d.setState(id, "stop", "exited")
}
func (d *Fake) ContainerPause(_ context.Context, id string) error {
	return d.setState(id, "pause", "paused")
}
func (d *Fake) ContainerUnpause(_ context.Context, id string) error {
	return d.setState(id, "unpause", "running")
}

func (d *Fake) ContainerRename(_ context.Context, id, name string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.call("rename", id)
	c, err := d.get(id)
	if err != nil {
		return err
	}
	delete(d.containers, c.name)
	c.name = name
	d.containers[name] = c
	return nil
}

func (d *Fake) ContainerRemove(_ context.Context, id string, _ container.RemoveOptions) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.call("remove", id)
	c, err := d.get(id)
	if err != nil {
		return err
	}
	delete(d.containers, c.name)
	return nil
}

func (d *Fake) ContainerInspect(_ context.Context, id string) (container.InspectResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c, err := d.get(id)
	if err != nil {
		return container.InspectResponse{}, err
	}
	st := &container.State{Status: container.ContainerState(c.state), Running: c.state == "running" || c.state == "paused",
		Paused: c.state == "paused", ExitCode: c.exitCode}
	return container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{ID: c.id, Name: "/" + c.name, State: st},
		Config: &container.Config{Labels: c.labels}}, nil
}

func (d *Fake) ContainerList(_ context.Context, opts container.ListOptions) ([]container.Summary, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []container.Summary
	for _, c := range d.containers {
		if opts.Filters.Contains("status") && !opts.Filters.ExactMatch("status", c.state) {
			continue
		}
		out = append(out, container.Summary{ID: c.id, Names: []string{"/" + c.name}, State: container.ContainerState(c.state),
			Labels: c.labels, Created: c.created.Unix()})
	}
	return out, nil
}

func (d *Fake) Events(ctx context.Context, _ events.ListOptions) (<-chan events.Message, <-chan error) {
	return make(chan events.Message), make(chan error)
}

// Has reports whether a container of that name exists.
func (d *Fake) Has(name string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.containers[name]
	return ok
}

func (d *Fake) VolumeCreate(_ context.Context, o volume.CreateOptions) (volume.Volume, error) {
	return volume.Volume{Name: o.Name, Labels: o.Labels}, nil
}

func (d *Fake) VolumeList(context.Context, volume.ListOptions) (volume.ListResponse, error) {
	return volume.ListResponse{}, nil
}

func (d *Fake) VolumeRemove(context.Context, string, bool) error { return nil }

func (d *Fake) Info(context.Context) (system.Info, error) { return system.Info{NCPU: 2}, nil }

// Calls returns the calls made so far, "op ref" each.
func (d *Fake) Calls() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.calls...)
}

// Count returns how many calls of op were made.
func (d *Fake) Count(op string) int {
	n := 0
	for _, c := range d.Calls() {
		if strings.HasPrefix(c, op+" ") {
			n++
		}
	}
	return n
}
