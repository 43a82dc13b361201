package images

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/testkit"
)

// newProjects is a Projects over the real engine that allows the OS base
// (Debian, which worker-base is made of) and removes every image its
// builds made when the test ends.
func newProjects(t *testing.T) (*Projects, *countingClient) {
	t.Helper()
	im, cc, _ := newImages(t)
	im.BaseImage = testkit.WorkerBaseImage()
	p := &Projects{Builder: im, Allowed: []string{testkit.OSBaseImage()}, Timeout: 5 * time.Minute}
	return p, cc
}

// removeImages removes, at the end of the test, the worker images the
// test made and then the project images under them (the runtime's agent
// image stays: it is worker-base's, shared by the package's tests).
func removeImages(t *testing.T) func(tag string) {
	var tags []string
	t.Cleanup(func() {
		for _, tag := range tags {
			_ = exec.Command("docker", "rmi", tag).Run()
		}
	})
	return func(tag string) { tags = append(tags, tag) }
}

// projectTag is the worker-project image under a worker image (its
// layer's FROM, the first of its parents with that repository's tag).
func projectTag(t *testing.T, img Image) string {
	t.Helper()
	out, err := exec.Command("docker", "image", "inspect", "-f", "{{index .Config.Labels \"io.agentvisor.project_phase\"}}", img.Tag).Output()
	if err != nil || strings.TrimSpace(string(out)) != "layer" {
		t.Fatalf("image %s: phase label %q, %v", img.Tag, out, err)
	}
	under, err := testkit.TagsUnder(img.Tag, ProjectRepository+":")
	if err != nil {
		t.Fatal(err)
	}
	if len(under) > 0 {
		return under[0]
	}
	t.Fatalf("no %s image under %s", ProjectRepository, img.Tag)
	return ""
}

func TestProjectImageAllowlist(t *testing.T) {
	p, cc := newProjects(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		image protocol.ProjectImage
		ref   string
	}{
		{"base", protocol.ProjectImage{Base: "debian:bookworm"}, "debian:bookworm"},
		{"devcontainer image", protocol.ProjectImage{Devcontainer: `{"image": "alpine"}`}, "alpine"},
		{"dockerfile FROM", protocol.ProjectImage{Dockerfile: "FROM " + testkit.OSBaseImage() + " AS ok\nFROM busybox\n"}, "busybox"},
		{"dockerfile COPY --from", protocol.ProjectImage{Dockerfile: "FROM " + testkit.OSBaseImage() + "\nCOPY --from=docker:cli /usr/local/bin/docker /x\n"}, "docker:cli"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			builds := cc.builds.Load()
			_, err := p.Ensure(ctx, protocol.AgentClaude, nil, &tc.image, nil)
			var na *NotAllowedError
			if !errors.As(err, &na) || na.Ref != tc.ref {
				t.Fatalf("error %v, want image %s not allowed", err, tc.ref)
			}
			if n := cc.builds.Load() - builds; n != 0 {
				t.Fatalf("%d builds ran for a refused image", n)
			}
		})
	}
	if _, err := p.Ensure(ctx, protocol.AgentClaude, nil, &protocol.ProjectImage{Dockerfile: "ARG B=" + testkit.OSBaseImage() + "\nFROM ${B}\n"}, nil); err == nil || !strings.Contains(err.Error(), "build arguments") {
		t.Fatalf("a FROM of build arguments: %v", err)
	}
	p.Allowed = nil
	var na *NotAllowedError
	if _, err := p.Ensure(ctx, protocol.AgentClaude, nil, &protocol.ProjectImage{Base: testkit.OSBaseImage()}, nil); !errors.As(err, &na) {
		t.Fatalf("with no allowlist: %v, want not allowed", err)
	}
}

// A project's Dockerfile is built once: the same file again reuses both
// of its images, with no build; a changed one makes new ones. The worker
// image has the project's tool, the wrapper, the agent and the
// devcontainer's environment.
func TestProjectImageReusedAndRebuilt(t *testing.T) {
	p, cc := newProjects(t)
	ctx := context.Background()
	mark := fmt.Sprintf("%d", time.Now().UnixNano())
	dockerfile := func(v string) string {
		return "FROM " + testkit.OSBaseImage() + "\n" +
			"RUN printf '#!/bin/sh\\necho projtool " + v + " \"$@\"\\n' > /usr/local/bin/projtool && chmod 0755 /usr/local/bin/projtool\n" +
			"LABEL test.mark=" + mark + "\n"
	}
	dev := `{
		// the project's devcontainer
		"build": {"dockerfile": "Dockerfile"},
		"containerEnv": {"PROJ_MODE": "dev $HOME"},
		"postCreateCommand": "projtool made > /etc/projtool-made",
	}`
	var mu sync.Mutex
	var lines []string
	onLine := func(phase, tag, line string) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, phase+": "+line)
	}
	first, err := p.Ensure(ctx, protocol.AgentClaude, nil, &protocol.ProjectImage{Devcontainer: dev, Dockerfile: dockerfile("v1")}, onLine)
	if err != nil {
		t.Fatal(err)
	}
	remove := removeImages(t)
	remove(first.Tag)
	remove(projectTag(t, first))
	if !first.Built || !strings.HasPrefix(first.Tag, protocol.ImageRepository+":") {
		t.Fatalf("first %+v, want built", first)
	}
	mu.Lock()
	log := strings.Join(lines, "\n")
	mu.Unlock()
	for _, want := range []string{"project: Step 2/5 : RUN printf", "layer: Step", "layer: Successfully tagged " + first.Tag} {
		if !strings.Contains(log, want) {
			t.Errorf("the build's lines lack %q:\n%s", want, log)
		}
	}
	out, err := exec.Command("docker", "run", "--rm", "--network", "none", "--entrypoint", "/bin/sh", first.Tag, "-c",
		`projtool hi; cat /etc/projtool-made; echo "mode=$PROJ_MODE"; id -u; test -x /usr/local/bin/worker-wrapper && test -x /usr/local/bin/claude && echo runtime-ok; pwd; stat -c 'bin=%U:%a' /usr/local/bin`).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"projtool v1 hi", "projtool v1 made", "mode=dev $HOME", "1000", "runtime-ok", "/workspace", "bin=root:755"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the image's run printed %q, want %q in it", out, want)
		}
	}

	// Their use is recorded, so the image GC knows them as this prefix's:
	// unused past the retention, the worker image goes, then the project's.
	gc := &GC{Docker: cc.Client, Redis: p.Builder.Redis, Keys: p.Builder.Keys, Labels: []string{"test.mark=" + mark}, Now: func() time.Time { return time.Now().Add(8 * 24 * time.Hour) }, DryRun: true}
	rep, err := gc.Collect(ctx)
	if err != nil || strings.Join(rep.Removed, " ") != first.Tag+" "+projectTag(t, first) {
		t.Fatalf("gc %+v, %v: want %s and its project image removed", rep, err, first.Tag)
	}

	builds := cc.builds.Load()
	p.Builder.Fresh = -1 // the engine is asked again, as after a restart
	again, err := p.Ensure(ctx, protocol.AgentClaude, nil, &protocol.ProjectImage{Devcontainer: dev, Dockerfile: dockerfile("v1")}, onLine)
	if err != nil {
		t.Fatal(err)
	}
	if again.Tag != first.Tag || again.ID != first.ID || again.Built || cc.builds.Load() != builds {
		t.Fatalf("again %+v after %+v (%d builds), want the same image, no build", again, first, cc.builds.Load()-builds)
	}
	changed, err := p.Ensure(ctx, protocol.AgentClaude, nil, &protocol.ProjectImage{Devcontainer: dev, Dockerfile: dockerfile("v2")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	remove(changed.Tag)
	remove(projectTag(t, changed))
	gc.DryRun = false
	if rep, err := gc.Collect(ctx); err != nil || len(rep.Removed) != 4 {
		t.Fatalf("gc %+v, %v: want the two worker images and their two project images removed", rep, err)
	}
	for _, tag := range []string{first.Tag, changed.Tag} {
		if _, err := cc.Client.ImageInspect(ctx, tag); err == nil {
			t.Errorf("%s is still there after the GC", tag)
		}
	}
	if changed.Tag == first.Tag || !changed.Built || cc.builds.Load()-builds != 2 {
		t.Fatalf("a changed Dockerfile gave %+v (%d builds), want a new image of two builds", changed, cc.builds.Load()-builds)
	}
}

// The build of a project's Dockerfile reaches nothing of the host: a RUN
// step that connects to a port the host listens on (on its loopback)
// fails, and the build with it, with its log; the host's listener sees no
// connection.
func TestProjectBuildReachesNoHostLoopback(t *testing.T) {
	p, _ := newProjects(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	label := fmt.Sprintf("test.t=%d", time.Now().UnixNano())
	testkit.RemoveImagesLabelled(t, label)
	df := fmt.Sprintf("FROM %s\nLABEL %s\nRUN bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d' && echo HOST-REACHED || { echo HOST-UNREACHED; exit 7; }\n",
		testkit.OSBaseImage(), label, port)
	_, err = p.Ensure(context.Background(), protocol.AgentClaude, nil, &protocol.ProjectImage{Dockerfile: df}, nil)
	var be *BuildError
	if !errors.As(err, &be) || !strings.Contains(be.Log, "HOST-UNREACHED") || strings.Contains(be.Log, "HOST-REACHED\n") {
		t.Fatalf("error %v, want a failed build whose log says HOST-UNREACHED", err)
	}
	if !strings.Contains(err.Error(), "non-zero code: 7") {
		t.Errorf("error %v, want the step's exit code 7", err)
	}
	if n := accepted.Load(); n != 0 {
		t.Fatalf("the host's listener accepted %d connections from the build", n)
	}
}

func TestDockerfileImages(t *testing.T) {
	got, err := DockerfileImages("# syntax=docker/dockerfile:1\nFROM --platform=linux/amd64 a:1 AS build\nRUN x \\\n  && y\nFROM build AS test\nFROM b\nCOPY --from=build /x /x\nCOPY --from=0 /y /y\nCOPY --from=c:2 /z /z\nFROM scratch\n")
	if err != nil || strings.Join(got, " ") != "a:1 b c:2" {
		t.Fatalf("got %v, %v", got, err)
	}
	for _, bad := range []string{"RUN x\n", "# escape=`\nFROM a\n", "FROM\n", "FROM $X\n"} {
		if _, err := DockerfileImages(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestAllowed(t *testing.T) {
	p := &Projects{Allowed: []string{"debian", "python:3.12-slim", "registry.local:5000/team/*"}}
	for ref, want := range map[string]bool{
		"debian": true, "debian:latest": true, "debian:bookworm": false, "python:3.12-slim": true, "python": false,
		"registry.local:5000/team/app:1": true, "registry.local:5000/other": false,
	} {
		if p.allowed(ref) != want {
			t.Errorf("allowed(%q) = %v, want %v", ref, !want, want)
		}
	}
}

// A project image that would undo what the runtime decides fails its
// build: its own ENV of a runtime variable, a capability whose command it
// lacks (the runtime installs none in a project's image).
func TestProjectImageRefusals(t *testing.T) {
	p, _ := newProjects(t)
	ctx := context.Background()
	label := fmt.Sprintf("test.t=%d", time.Now().UnixNano())
	mark := "LABEL " + label + "\n"
	testkit.RemoveImagesLabelled(t, label)
	for _, tc := range []struct {
		name  string
		image protocol.ProjectImage
		caps  []protocol.Capability
		want  string
	}{
		{"runtime variable", protocol.ProjectImage{Dockerfile: "FROM " + testkit.OSBaseImage() + "\n" + mark + "ENV ALLOWED_COMMANDS=*\n"}, nil, "sets ALLOWED_COMMANDS"},
		{"runtime directory left to the agent", protocol.ProjectImage{Dockerfile: "FROM " + testkit.OSBaseImage() + "\n" + mark + "RUN rm -rf /usr/local/bin && ln -s /tmp /usr/local/bin\n"}, nil, "/usr/local/bin is a symbolic link"},
		{"capability without its command", protocol.ProjectImage{Base: testkit.OSBaseImage()}, []protocol.Capability{protocol.CapGit}, "capability GIT needs git"},
		{"DOCKER without podman", protocol.ProjectImage{Base: testkit.OSBaseImage()}, []protocol.Capability{protocol.CapDocker}, "capability DOCKER needs podman"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := p.Ensure(ctx, protocol.AgentClaude, tc.caps, &tc.image, nil)
			var be *BuildError
			if !errors.As(err, &be) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want a build error with %q", err, tc.want)
			}
		})
	}
}
