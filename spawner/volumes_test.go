package spawner

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

func TestProjectVolumeNamesDoNotCollide(t *testing.T) {
	seen := map[string]string{}
	for _, c := range []struct {
		prefix  string
		agent   protocol.AgentType
		project string
	}{
		{"worker", protocol.AgentClaude, "flt/x"}, {"worker", protocol.AgentClaude, "flt_x"}, {"worker", protocol.AgentClaude, "flt x"},
		{"staging", protocol.AgentClaude, "flt/x"}, {"worker", protocol.AgentDroid, "flt/x"},
	} {
		name := ProjectVolume(c.prefix, c.agent, c.project)
		key := c.prefix + "|" + string(c.agent) + "|" + c.project
		if other, dup := seen[name]; dup {
			t.Fatalf("%s and %s share the volume %s", key, other, name)
		}
		seen[name] = key
	}
}

// A project volume carries its owner's labels, is listed, is kept while
// in use or recent, and is removed once unused past the retention.
func TestProjectVolumesAreLabelledListedAndCollected(t *testing.T) {
	f := newFixture(t, func(c *Config) { useFakeAgent(c); c.VolumeRetention = time.Hour })
	ctx := context.Background()
	spec := fakeSpec
	spec.ProjectID = "flt/x"
	name := ProjectVolume(f.keys.Prefix, spec.AgentType, spec.ProjectID)
	t.Cleanup(func() { exec.Command("docker", "volume", "rm", "-f", name).Run() })
	w, err := f.s.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	vs, err := f.s.Volumes(ctx)
	if err != nil || len(vs) != 1 || vs[0].Name != name || vs[0].ProjectID != "flt/x" || vs[0].AgentType != protocol.AgentClaude || vs[0].LastUsed.IsZero() {
		t.Fatalf("volumes %+v %v", vs, err)
	}
	f.s.now = func() time.Time { return time.Now().Add(2 * time.Hour) } // past the retention
	if removed := f.s.volumes.collect(ctx); len(removed) != 0 {
		t.Fatalf("a volume in use was removed: %v", removed)
	}
	if err := f.s.Delete(ctx, w.WorkerID); err != nil {
		t.Fatal(err)
	}
	if removed := f.s.volumes.collect(ctx); len(removed) != 1 || removed[0] != name {
		t.Fatalf("removed %v, want the stale unused volume", removed)
	}
	if vs, _ := f.s.Volumes(ctx); len(vs) != 0 {
		t.Fatalf("volumes left %+v", vs)
	}
}
