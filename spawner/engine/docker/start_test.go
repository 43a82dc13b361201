package docker

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/agentvisor/agentvisor/spawner/engine"
	"github.com/agentvisor/agentvisor/spawner/engine/docker/dockertest"
	"github.com/agentvisor/agentvisor/testkit"
)

// holderGone is an engine whose first start of a worker's container fails
// as it does when the spare namespace it joins went before the start.
type holderGone struct {
	*dockertest.Fake
	mu     sync.Mutex
	failed bool
}

func (d *holderGone) ContainerStart(ctx context.Context, id string, o container.StartOptions) error {
	d.mu.Lock()
	fail := !d.failed && strings.HasPrefix(id, "cid-agentvisor-")
	d.failed = d.failed || fail
	d.mu.Unlock()
	if fail {
		return errors.New("joining network namespace of container: no such container")
	}
	return d.Fake.ContainerStart(ctx, id, o)
}

type noMarks struct{}

func (noMarks) MarkSpareNetns(context.Context, []string, time.Duration) error { return nil }
func (noMarks) SpareNetnsMarked(context.Context, []string) (map[string]bool, error) {
	return map[string]bool{}, nil
}

// A sealed container whose spare namespace went before its start is made
// again on a namespace of its own and started: Start returns the new
// container's id, and the spare it was to join is given back.
func TestStartMakesTheContainerAgainWhenItsSpareWent(t *testing.T) {
	d := &holderGone{Fake: dockertest.New()}
	e := New(d, "unit", slog.New(slog.NewTextHandler(io.Discard, nil)))
	e.KeepSpares(Spares{Count: 1, Image: func() string { return "base" }, ManagerID: "m1", Host: func() string { return "h1" },
		MarkTTL: time.Minute, Marks: noMarks{}})
	defer e.Close(context.Background())
	e.Prepare()
	testkit.Eventually(t, "a spare namespace", 5*time.Second, e.SparesSettled)
	ctx := context.Background()
	id, err := e.Create(ctx, engine.Spec{Name: engine.InstanceName("w1"), Image: "worker", Network: engine.Sealed})
	if err != nil {
		t.Fatal(err)
	}
	removed := d.Count("remove")
	got, err := e.Start(ctx, id)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	if d.Count("create") < 3 || d.Count("remove") < removed+2 {
		t.Fatalf("calls %v: want the container made again and the first one and its spare removed", d.Calls())
	}
	in, err := e.Inspect(ctx, got)
	if err != nil || in.State != engine.Running || in.Worker != "w1" {
		t.Fatalf("the container Start returned: %+v %v", in, err)
	}
}
