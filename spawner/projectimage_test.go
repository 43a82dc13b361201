package spawner

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/images"
	"github.com/agentvisor/agentvisor/stubmodel"
	"github.com/agentvisor/agentvisor/testkit"
)

// A worker built from a project's devcontainer.json (its Dockerfile on
// the OS base installs projtool, which worker-base lacks) runs a task in
// which the real claude, sealed as by default, calls that tool; the
// build's log reached the worker's lifecycle as image_build events.
func TestDevcontainerWorkerRunsTheProjectsTool(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.ProjectBases = []string{testkit.OSBaseImage()} })
	ctx := context.Background()
	mark := fmt.Sprintf("%d", time.Now().UnixNano())
	dockerfile := "FROM " + testkit.OSBaseImage() + "\nLABEL test.mark=" + mark + "\n" +
		"RUN printf '#!/bin/sh\\necho \"projtool says $PROJ_GREETING to $1\"\\n' > /usr/local/bin/projtool && chmod 0755 /usr/local/bin/projtool\n"
	devcontainer := `{
		"name": "shop",
		"build": {"dockerfile": "Dockerfile"},
		"containerEnv": {"PROJ_GREETING": "hello"},
		"remoteUser": "root",
		"postCreateCommand": "projtool build > /etc/projtool.log",
	}`
	base, err := f.s.Create(ctx, protocol.WorkerSpec{AgentType: protocol.AgentClaude})
	if err != nil {
		t.Fatal(err)
	}
	spec := protocol.WorkerSpec{AgentType: protocol.AgentClaude, AllowedCommands: []string{"*"},
		Image: &protocol.ProjectImage{Devcontainer: devcontainer, Dockerfile: dockerfile}}
	info, err := f.s.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	// After the test's containers (CleanupLabelled runs later, as it was
	// registered first): the worker image, then the project's.
	t.Cleanup(func() { testkit.RemoveImageAndTagsUnder(info.Image, images.ProjectRepository+":") })
	if info.Image == base.Image || info.Status != protocol.ContainerRunning {
		t.Fatalf("info %+v, want a running worker on an image of its own (not %s)", info, base.Image)
	}
	if out, err := exec.Command("docker", "exec", base.ContainerID, "sh", "-c", "command -v projtool || echo absent").CombinedOutput(); err != nil || !strings.Contains(string(out), "absent") {
		t.Fatalf("worker-base has projtool? %q %v", out, err)
	}
	if n := f.countEvents(t, info.WorkerID, protocol.EventImageBuild); n < 2 {
		t.Errorf("%d image_build events, want the build's progress", n)
	}

	f.stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{
		{ToolUse: &stubmodel.ToolUse{Name: "Bash", Input: map[string]any{"command": "projtool claude; cat /etc/projtool.log", "description": "the project's tool"}}},
		{Text: "Done.\n{\"status\": \"complete\", \"result\": {\"ok\": true}}"},
	}})
	f.send(t, f.keys.Input(info.WorkerID), protocol.Task{RequestID: "projtool-1", Prompt: "Run the project's tool"})
	o := f.waitOutput(t, f.keys.Output(info.WorkerID), "projtool-1", 120*time.Second)
	if o.Status != protocol.StatusComplete {
		t.Fatalf("output %+v (error %+v), want complete", o, o.Error)
	}
	var saw strings.Builder
	for _, req := range f.stub.Requests() {
		saw.WriteString(req.Text())
	}
	for _, want := range []string{"projtool says hello to claude", "projtool says hello to build"} {
		if !strings.Contains(saw.String(), want) {
			t.Errorf("the model was not sent %q; it saw:\n%s", want, saw.String())
		}
	}
}

// A spec whose project image starts from a base the operator does not
// allow is refused with IMAGE_NOT_ALLOWED, before any build, and leaves
// no worker; a manager with no allowlist refuses every project image.
func TestProjectImageOutsideTheAllowlist(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.ProjectBases = []string{testkit.OSBaseImage()} })
	ctx := context.Background()
	for _, img := range []protocol.ProjectImage{
		{Base: "debian:bookworm-slim"},
		{Dockerfile: "FROM " + testkit.OSBaseImage() + "\nCOPY --from=docker:cli /usr/local/bin/docker /usr/local/bin/\n"},
	} {
		_, err := f.s.Create(ctx, protocol.WorkerSpec{AgentType: protocol.AgentClaude, Image: &img})
		var se *Error
		if !errors.As(err, &se) || se.Code != protocol.CodeImageNotAllowed {
			t.Fatalf("create on %+v: %v, want IMAGE_NOT_ALLOWED", img, err)
		}
		if p := ProtocolError(err); p.Retryable {
			t.Errorf("%+v is retryable", p)
		}
	}
	if n, err := f.rc.SCard(ctx, f.keys.Workers()).Result(); err != nil || n != 0 {
		t.Fatalf("%d workers after refused creates (%v)", n, err)
	}
}

// A project whose Dockerfile fails is answered IMAGE_BUILD_FAILED with
// the log's last lines, at once, and leaves no worker; its image_build
// events end with done and the error.
func TestProjectImageBuildFailure(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.ProjectBases = []string{testkit.OSBaseImage()} })
	ctx := context.Background()
	label := fmt.Sprintf("test.t=%d", time.Now().UnixNano())
	testkit.RemoveImagesLabelled(t, label)
	df := fmt.Sprintf("FROM %s\nLABEL %s\nRUN echo the-tests-fail >&2; exit 3\n", testkit.OSBaseImage(), label)
	_, err := f.s.Create(ctx, protocol.WorkerSpec{AgentType: protocol.AgentClaude, Image: &protocol.ProjectImage{Dockerfile: df}})
	var se *Error
	if !errors.As(err, &se) || se.Code != protocol.CodeImageBuildFailed || !strings.Contains(err.Error(), "the-tests-fail") {
		t.Fatalf("create: %v, want IMAGE_BUILD_FAILED with the log", err)
	}
	if n, err := f.rc.SCard(ctx, f.keys.Workers()).Result(); err != nil || n != 0 {
		t.Fatalf("%d workers after a failed build (%v)", n, err)
	}
	msgs, err := f.rc.XRange(ctx, f.keys.Lifecycle(), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	var last protocol.Lifecycle
	for _, m := range msgs {
		data, _ := protocol.EntryData(m.Values)
		if l, err := protocol.DecodeLifecycle(data); err == nil && l.Event == protocol.EventImageBuild {
			last = l
		}
	}
	if last.Detail["done"] != true || !strings.Contains(fmt.Sprint(last.Detail["error"]), "the-tests-fail") {
		t.Fatalf("last image_build event %+v, want done with the error", last)
	}
}
