package spawner

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/system"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/errdefs"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/testkit"
)

// fakeDocker is an in-memory engine for the decision logic's unit tests:
// containers by name with a state, and the calls made.
type fakeDocker struct {
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

var _ ContainerClient = (*fakeDocker)(nil)

func newFakeDocker() *fakeDocker { return &fakeDocker{containers: map[string]*fakeContainer{}} }

func (d *fakeDocker) add(name, state string, labels map[string]string, created time.Time) *fakeContainer {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := &fakeContainer{id: "cid-" + name, name: name, state: state, labels: labels, created: created}
	d.containers[name] = c
	return c
}

func (d *fakeDocker) get(ref string) (*fakeContainer, error) {
	for _, c := range d.containers {
		if c.name == ref || c.id == ref {
			return c, nil
		}
	}
	return nil, errdefs.NotFound(fmt.Errorf("no such container: %s", ref))
}

func (d *fakeDocker) call(op, ref string) {
	d.calls = append(d.calls, op+" "+ref)
}

func (d *fakeDocker) ContainerCreate(_ context.Context, cfg *container.Config, _ *container.HostConfig, _ *network.NetworkingConfig, _ *ocispec.Platform, name string) (container.CreateResponse, error) {
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

func (d *fakeDocker) setState(ref, op, state string, from ...string) error {
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

func (d *fakeDocker) ContainerStart(_ context.Context, id string, _ container.StartOptions) error {
	return d.setState(id, "start", "running")
}
func (d *fakeDocker) ContainerStop(_ context.Context, id string, _ container.StopOptions) error {
	return d.setState(id, "stop", "exited")
}
func (d *fakeDocker) ContainerPause(_ context.Context, id string) error {
	return d.setState(id, "pause", "paused")
}
func (d *fakeDocker) ContainerUnpause(_ context.Context, id string) error {
	return d.setState(id, "unpause", "running")
}

func (d *fakeDocker) ContainerRename(_ context.Context, id, name string) error {
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

func (d *fakeDocker) ContainerRemove(_ context.Context, id string, _ container.RemoveOptions) error {
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

func (d *fakeDocker) ContainerInspect(_ context.Context, id string) (container.InspectResponse, error) {
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

func (d *fakeDocker) ContainerList(_ context.Context, opts container.ListOptions) ([]container.Summary, error) {
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

func (d *fakeDocker) Events(ctx context.Context, _ events.ListOptions) (<-chan events.Message, <-chan error) {
	return make(chan events.Message), make(chan error)
}

func (d *fakeDocker) has(name string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.containers[name]
	return ok
}

// unit is a Spawner over the fake engine and a real Redis, with a clock
// the test moves.
type unit struct {
	s      *Spawner
	d      *fakeDocker
	rc     *redis.Client
	keys   protocol.Keys
	mu     sync.Mutex
	nowVal time.Time
}

func newUnit(t *testing.T, mod func(*Config)) *unit {
	t.Helper()
	r, rc := testkit.StartRedisClient(t)
	cfg, err := ConfigFromEnv(func(k string) string {
		return map[string]string{"REDIS_URL": r.URL(), "WORKER_KEY_PREFIX": "unit", "WORKER_STOP_TIMEOUT": "12s",
			"HEARTBEAT_INTERVAL": "1s", "CREATION_GRACE": "30s", "MANAGER_ID": "m1"}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	if mod != nil {
		mod(&cfg)
	}
	u := &unit{d: newFakeDocker(), rc: rc, keys: cfg.Keys, nowVal: time.Now()}
	u.s = New(cfg, u.d, rc, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	u.s.now = u.now
	return u
}

func (u *unit) now() time.Time {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.nowVal
}

func (u *unit) advance(d time.Duration) {
	u.mu.Lock()
	u.nowVal = u.nowVal.Add(d)
	u.mu.Unlock()
}

// worker records a member of the workers set with a container in state.
func (u *unit) worker(t *testing.T, id, state string, created time.Time) {
	t.Helper()
	ctx := context.Background()
	u.rc.SAdd(ctx, u.keys.Workers(), id)
	u.rc.HSet(ctx, u.keys.Status(id), protocol.StatusFieldContainer, map[string]string{"running": "running", "paused": "paused"}[state],
		protocol.StatusFieldKind, string(protocol.KindLongLived), protocol.StatusFieldCreatedAt, protocol.FormatTime(created),
		protocol.StatusFieldAgentType, string(protocol.AgentClaude))
	u.rc.XGroupCreateMkStream(ctx, u.keys.Input(id), protocol.WorkerGroup, "0")
	if state != "" {
		u.d.add(ContainerName(id), state, u.labels(id, created), created)
	}
}

func (u *unit) labels(id string, created time.Time) map[string]string {
	return map[string]string{protocol.LabelManaged: "true", protocol.LabelKeyPrefix: u.keys.Prefix, protocol.LabelWorkerID: id,
		protocol.LabelCreatedAt: protocol.FormatTime(created)}
}

// task adds a task to a worker's input and, when read, delivers it.
func (u *unit) task(t *testing.T, id, requestID string, read bool) {
	t.Helper()
	ctx := context.Background()
	doc, _ := protocol.NewTask(requestID, "p").Encode()
	u.rc.XAdd(ctx, &redis.XAddArgs{Stream: u.keys.Input(id), Values: protocol.Values(doc)})
	if read {
		u.rc.XReadGroup(ctx, &redis.XReadGroupArgs{Group: protocol.WorkerGroup, Consumer: id, Streams: []string{u.keys.Input(id), ">"}, Count: 1})
	}
}

// outputs counts the outputs per request id on a worker's output stream.
func (u *unit) outputs(t *testing.T, id string) map[string]protocol.Output {
	t.Helper()
	msgs, err := u.rc.XRange(context.Background(), u.keys.Output(id), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]protocol.Output{}
	for _, m := range msgs {
		data, _ := protocol.EntryData(m.Values)
		o, err := protocol.DecodeOutput(data)
		if err != nil {
			t.Fatal(err)
		}
		if _, dup := out[o.RequestID]; dup {
			t.Fatalf("two outputs for %s", o.RequestID)
		}
		out[o.RequestID] = o
	}
	return out
}

func redisZ(at time.Time, member string) redis.Z {
	return redis.Z{Score: float64(at.UnixMilli()), Member: member}
}

func (d *fakeDocker) VolumeCreate(_ context.Context, o volume.CreateOptions) (volume.Volume, error) {
	return volume.Volume{Name: o.Name, Labels: o.Labels}, nil
}

func (d *fakeDocker) VolumeList(context.Context, volume.ListOptions) (volume.ListResponse, error) {
	return volume.ListResponse{}, nil
}

func (d *fakeDocker) VolumeRemove(context.Context, string, bool) error { return nil }

func (d *fakeDocker) Info(context.Context) (system.Info, error) { return system.Info{NCPU: 2}, nil }
