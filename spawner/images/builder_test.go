package images

import (
	"context"
	"errors"
	"io"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/client"
	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/internal/ctlplane"
	"github.com/agentvisor/agentvisor/testkit"
)

// countingClient wraps the real Docker client and counts builds.
type countingClient struct {
	*client.Client
	builds atomic.Int32
}

func (c *countingClient) ImageBuild(ctx context.Context, r io.Reader, o build.ImageBuildOptions) (build.ImageBuildResponse, error) {
	c.builds.Add(1)
	return c.Client.ImageBuild(ctx, r, o)
}

func newImages(t testing.TB) (*Builder, *countingClient, *redis.Client) {
	t.Helper()
	testkit.WorkerImages(t) // the OS base and worker-base
	dc, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	// Negotiate now, before concurrent calls: the client negotiates
	// lazily, and that races between goroutines.
	dc.NegotiateAPIVersion(context.Background())
	t.Cleanup(func() { dc.Close() })
	rc := testkit.NewRedisClient(t)
	cc := &countingClient{Client: dc}
	return &Builder{Docker: cc, Redis: rc}, cc, rc
}

func TestEnsureImage(t *testing.T) {
	// A secret in the spawner's environment must not reach the image.
	t.Setenv("ANTHROPIC_API_KEY", testkit.BuildSecret)
	im, cc, rc := newImages(t)
	ctx := context.Background()

	// Ten concurrent calls for one recipe run one build (or none, when an
	// earlier run of the test left the image) and agree on the result.
	var wg sync.WaitGroup
	imgs := make([]Image, 10)
	errs := make([]error, 10)
	for i := range imgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			imgs[i], errs[i] = im.EnsureImage(ctx, protocol.AgentClaude, []protocol.Capability{protocol.CapGit})
		}()
	}
	wg.Wait()
	for i := range imgs {
		if errs[i] != nil {
			t.Fatalf("call %d: %v", i, errs[i])
		}
		if imgs[i].Tag != imgs[0].Tag || imgs[i].ID != imgs[0].ID {
			t.Fatalf("calls disagree: %+v vs %+v", imgs[i], imgs[0])
		}
	}
	if n := cc.builds.Load(); n > 1 {
		t.Fatalf("%d builds for one recipe", n)
	}
	if !strings.HasPrefix(imgs[0].Tag, "worker:") || len(imgs[0].Hash) != protocol.HashLen {
		t.Fatalf("tag %q", imgs[0].Tag)
	}

	// A hit builds nothing; the same capabilities in another order, with
	// duplicates or in lower case, are the same image.
	before := cc.builds.Load()
	again, err := im.EnsureImage(ctx, protocol.AgentClaude, []protocol.Capability{"git", protocol.CapGit})
	if err != nil || again.Tag != imgs[0].Tag || again.Built || cc.builds.Load() != before {
		t.Fatalf("hit: %+v %v (builds %d -> %d)", again, err, before, cc.builds.Load())
	}

	// The image carries its recipe; its use is recorded in Redis.
	info, err := cc.Client.ImageInspect(ctx, again.Tag)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := im.Recipe(ctx, protocol.AgentClaude, []protocol.Capability{protocol.CapGit})
	canonical, _ := r.Canonical()
	if info.Config.Labels[ctlplane.LabelRecipe] != canonical || info.Config.Labels[ctlplane.LabelRecipeHash] != again.Hash ||
		info.Config.Labels[ctlplane.LabelCapabilities] != "GIT" || info.Config.Labels[protocol.LabelManaged] != "true" {
		t.Fatalf("labels %v", info.Config.Labels)
	}
	if score, err := rc.ZScore(ctx, ctlplane.ImagesLastUsedKey(protocol.Keys{}), again.Tag).Result(); err != nil || time.Since(time.Unix(int64(score), 0)) > time.Minute {
		t.Fatalf("last use %v %v", score, err)
	}

	if h := run(t, nil, "docker", "history", "--no-trunc", again.Tag); strings.Contains(h, testkit.BuildSecret) {
		t.Error("the API key is in the image history")
	}
	save := exec.Command("docker", "save", again.Tag)
	stdout, _ := save.StdoutPipe()
	if err := save.Start(); err != nil {
		t.Fatal(err)
	}
	found, err := contains(stdout, []byte(testkit.BuildSecret))
	save.Wait()
	if err != nil || found {
		t.Errorf("the API key is in a layer of %s (%v)", again.Tag, err)
	}

	// The image runs the wrapper as PID 1, as uid 1000, with git and claude.
	out := run(t, nil, "docker", "run", "--rm", "--entrypoint", "/bin/sh", again.Tag, "-c", "id -u; git --version; claude --version")
	if !strings.HasPrefix(out, "1000\ngit version") || !strings.Contains(out, "2.1.197 (Claude Code)") {
		t.Fatalf("in the image: %q", out)
	}
}

func TestChangedBaseGivesNewTag(t *testing.T) {
	im, _, _ := newImages(t)
	ctx := context.Background()
	r1, err := im.Recipe(ctx, protocol.AgentClaude, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Another base image (the same worker-base with one more label) is
	// another recipe.
	testkit.BuildFrom(t, "agentvisor/worker-base:latest", "agentvisor/worker-base:test-changed", "io.agentvisor.test=changed-base")
	im2 := &Builder{Docker: im.Docker, BaseImage: "agentvisor/worker-base:test-changed"}
	r2, err := im2.Recipe(ctx, protocol.AgentClaude, nil)
	if err != nil {
		t.Fatal(err)
	}
	t1, _ := r1.Tag()
	t2, _ := r2.Tag()
	if t1 == t2 || r1.BaseImage == r2.BaseImage {
		t.Fatalf("same tag %s for two bases", t1)
	}
}

func TestBrokenRecipeFailsCleanly(t *testing.T) {
	im, cc, _ := newImages(t)
	saved := NPMRegistry
	NPMRegistry = "http://127.0.0.1:9/nowhere" // nothing listens: the download fails
	defer func() { NPMRegistry = saved }()
	// A recipe no other test builds (its own tag), on a base of its own.
	testkit.BuildFrom(t, "agentvisor/worker-base:latest", "agentvisor/worker-base:test-broken", "io.agentvisor.test=broken")
	im.BaseImage = "agentvisor/worker-base:test-broken"
	_, err := im.EnsureImage(context.Background(), protocol.AgentDroid, nil)
	var be *BuildError
	if !errors.As(err, &be) || !strings.Contains(be.Log, "curl") {
		t.Fatalf("err = %v, want a BuildError with the log's tail", err)
	}
	if _, ierr := cc.Client.ImageInspect(context.Background(), be.Tag); ierr == nil {
		t.Fatalf("the failed build left %s tagged", be.Tag)
	}
}

func TestCapabilityImages(t *testing.T) {
	im, _, _ := newImages(t)
	tests := []struct {
		agent protocol.AgentType
		cap   protocol.Capability
		cmd   string
		want  string
	}{
		{protocol.AgentClaude, protocol.CapGit, "git --version", "git version"},
		{protocol.AgentClaude, protocol.CapGitHubCLI, "gh --version", "gh version"},
		{protocol.AgentClaude, protocol.CapCurl, "curl --version", "curl "},
		// DOCKER's docker is Podman's, configured for a worker, with no
		// subordinate ids left.
		{protocol.AgentClaude, protocol.CapDocker, "docker --version | cut -d' ' -f1,2 && grep -c " + protocol.DockerStorage + " /etc/containers/storage.conf && cat /etc/subuid /etc/subgid | wc -c",
			"podman version\n1\n0"},
		{protocol.AgentDroid, protocol.CapGit, "droid --version && git --version", "git version"},
		{protocol.AgentCodex, protocol.CapGit, "codex --version && git --version", "codex-cli 0.171.0\ngit version"},
		{protocol.AgentQwen, protocol.CapGit, "qwen --version && node --version && git --version", "0.24.4\nv22.23.5\ngit version"},
	}
	for _, tt := range tests {
		t.Run(string(tt.agent)+"/"+string(tt.cap), func(t *testing.T) {
			img, err := im.EnsureImage(context.Background(), tt.agent, []protocol.Capability{tt.cap})
			if err != nil {
				t.Fatal(err)
			}
			out := run(t, nil, "docker", "run", "--rm", "--entrypoint", "/bin/sh", img.Tag, "-c", "id -u && "+tt.cmd)
			if !strings.HasPrefix(out, "1000\n") || !strings.Contains(out, tt.want) {
				t.Fatalf("in %s: %q", img.Tag, out)
			}
			// The ENTRYPOINT is the wrapper: without configuration it
			// exits 2 and names the variable.
			cmd := exec.Command("docker", "run", "--rm", img.Tag)
			b, _ := cmd.CombinedOutput()
			if cmd.ProcessState.ExitCode() != 2 || !strings.Contains(string(b), "WORKER_ID") {
				t.Fatalf("entrypoint: exit %d: %s", cmd.ProcessState.ExitCode(), b)
			}
		})
	}
}
