package images

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/docker/docker/client"
	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/internal/ctlplane"
	"github.com/agentvisor/agentvisor/testkit"
)

func TestImageGC(t *testing.T) {
	testkit.WorkerImages(t)
	dc, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	// Negotiate now, before concurrent calls: the client negotiates
	// lazily, and that races between goroutines.
	dc.NegotiateAPIVersion(context.Background())
	defer dc.Close()
	rc := testkit.NewRedisClient(t)
	defer rc.Close()
	ctx := context.Background()
	scope := fmt.Sprintf("io.agentvisor.test.gc=%d", time.Now().UnixNano())

	// Four worker images of this test only: a and b unused for ten days,
	// c used now; b runs in a paused container; d was never used by this
	// prefix (another prefix's, or another tool's).
	tags := map[string]string{}
	for _, name := range []string{"a", "b", "c", "d"} {
		tag := fmt.Sprintf("worker:gctest-%s-%d", name, time.Now().UnixNano())
		testkit.BuildFrom(t, "agentvisor/worker-base:latest", tag, fmt.Sprintf("%s=true %s x=%s", protocol.LabelManaged, scope, tag))
		tags[name] = tag
	}
	keys := protocol.Keys{}
	old := float64(time.Now().Add(-10 * 24 * time.Hour).Unix())
	rc.ZAdd(ctx, ctlplane.ImagesLastUsedKey(keys), redis.Z{Score: old, Member: tags["a"]}, redis.Z{Score: old, Member: tags["b"]},
		redis.Z{Score: float64(time.Now().Unix()), Member: tags["c"]})
	name := fmt.Sprintf("gctest-%d", time.Now().UnixNano())
	run(t, nil, "docker", "run", "-d", "--name", name, "--entrypoint", "/bin/sleep", tags["b"], "300")
	t.Cleanup(func() { exec.Command("docker", "rm", "-f", name).Run() })
	run(t, nil, "docker", "pause", name)

	gc := &GC{Docker: dc, Redis: rc, Keys: keys, Labels: []string{scope}, DryRun: true}
	rep, err := gc.Collect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.Removed, []string{tags["a"]}) || !slices.Equal(rep.KeptInUse, []string{tags["b"]}) || rep.Kept != 1 || rep.NotOurs != 1 {
		t.Fatalf("dry run: %+v", rep)
	}
	if _, err := dc.ImageInspect(ctx, tags["a"]); err != nil {
		t.Fatal("the dry run removed an image")
	}

	gc.DryRun = false
	if rep, err = gc.Collect(ctx); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.Removed, []string{tags["a"]}) {
		t.Fatalf("collect: %+v", rep)
	}
	if _, err := dc.ImageInspect(ctx, tags["a"]); err == nil {
		t.Fatal("the stale unused image is still there")
	}
	for _, keep := range []string{"b", "c", "d"} {
		if _, err := dc.ImageInspect(ctx, tags[keep]); err != nil {
			t.Fatalf("image %s was removed: %v", keep, err)
		}
	}
	if n, _ := rc.ZScore(ctx, ctlplane.ImagesLastUsedKey(keys), tags["a"]).Result(); n != 0 {
		t.Fatal("the removed image's last use is still recorded")
	}
}
