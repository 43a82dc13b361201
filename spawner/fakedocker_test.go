package spawner

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/spawner/engine"
	"github.com/agentvisor/agentvisor/spawner/engine/docker/dockertest"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/testkit"
)

// unit is a Spawner over the Docker engine on an in-memory Docker
// (engine/docker/dockertest) and a real Redis, with a clock the test
// moves.
type unit struct {
	s      *Spawner
	d      *dockertest.Fake
	rc     *redis.Client
	keys   protocol.Keys
	mu     sync.Mutex
	nowVal time.Time
}

func newUnit(t *testing.T, mod func(*Config)) *unit { t.Helper(); return newUnitOf(t, mod, false) }

// newUnitOf is newUnit; unfrozen makes its engine one that cannot freeze
// (as Kubernetes cannot): the in-memory Docker behind noFreeze.
func newUnitOf(t *testing.T, mod func(*Config), unfrozen bool) *unit {
	t.Helper()
	r, rc := testkit.StartRedisClient(t)
	cfg, err := ConfigFromEnv(func(k string) string {
		return map[string]string{"REDIS_URL": r.URL(), "WORKER_KEY_PREFIX": "unit", "WORKER_STOP_TIMEOUT": "12s",
			"HEARTBEAT_INTERVAL": "1s", "CREATION_GRACE": "30s", "MANAGER_ID": "m1"}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg.DiskLimit = 0 // the in-memory Docker runs no container for a disk to be bound into
	if mod != nil {
		mod(&cfg)
	}
	u := &unit{d: dockertest.New(), rc: rc, keys: cfg.Keys, nowVal: time.Now()}
	u.s = NewDocker(cfg, u.d, rc, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if unfrozen {
		u.s = New(cfg, noFreeze{u.s.engine}, rc, nil, u.s.log)
	}
	u.s.now = u.now
	return u
}

// noFreeze is an engine that cannot suspend, over one that can.
type noFreeze struct{ engine.Engine }

func (noFreeze) Suspends() bool { return false }
func (noFreeze) Suspend(context.Context, string) error {
	return engine.Wrap(engine.ErrUnsupported, errors.New("no freeze"))
}
func (n noFreeze) Resume(ctx context.Context, id string) error {
	_, err := n.Inspect(ctx, id)
	return err
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
		u.d.Add(ContainerName(id), state, u.labels(id, created), created)
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
