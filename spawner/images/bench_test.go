package images

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/testkit"
)

func p99(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[int(float64(len(s)-1)*0.99)]
}

// BenchmarkEnsureImageHit: EnsureImage of an image that exists, against a
// bare ImageInspect of it in the same run (goal: p99 < 20 ms).
func BenchmarkEnsureImageHit(b *testing.B) {
	im, cc, _ := newImages(b)
	ctx := context.Background()
	img, err := im.EnsureImage(ctx, protocol.AgentClaude, []protocol.Capability{protocol.CapGit})
	if err != nil {
		b.Fatal(err)
	}
	var hit, bare []float64
	for i := 0; i < 300; i++ {
		t0 := time.Now()
		if _, err := im.EnsureImage(ctx, protocol.AgentClaude, []protocol.Capability{protocol.CapGit}); err != nil {
			b.Fatal(err)
		}
		hit = append(hit, float64(time.Since(t0).Microseconds())/1000)
		t0 = time.Now()
		if _, err := cc.Client.ImageInspect(ctx, img.Tag); err != nil {
			b.Fatal(err)
		}
		bare = append(bare, float64(time.Since(t0).Microseconds())/1000)
	}
	b.ReportMetric(p99(hit), "ensure-hit-p99-ms")
	b.ReportMetric(p99(bare), "bare-inspect-p99-ms")
	b.ReportMetric(p99(hit)/p99(bare), "ratio")
}

// BenchmarkColdBuild builds each capability image on a base no earlier
// build used (so nothing of the recipe is cached but the OS and
// worker-base layers), and reports the build times and the image sizes.
func BenchmarkColdBuild(b *testing.B) {
	im, cc, _ := newImages(b)
	ctx := context.Background()
	base := fmt.Sprintf("agentvisor/worker-base:bench-%d", time.Now().UnixNano())
	testkit.BuildFrom(b, "agentvisor/worker-base:latest", base, fmt.Sprintf("io.agentvisor.bench=%d", time.Now().UnixNano()))
	im.BaseImage = base
	var tags []string
	b.Cleanup(func() {
		for _, t := range tags {
			exec.Command("docker", "rmi", t).Run()
		}
	})
	wb, _ := cc.Client.ImageInspect(ctx, base)
	b.ReportMetric(float64(wb.Size)/1e6, "worker-base-MB")
	for _, c := range []protocol.Capability{"", protocol.CapGit, protocol.CapGitHubCLI, protocol.CapCurl, protocol.CapDocker} {
		caps := []protocol.Capability{}
		name := "agent-only"
		if c != "" {
			caps, name = append(caps, c), string(c)
		}
		t0 := time.Now()
		img, err := im.EnsureImage(ctx, protocol.AgentClaude, caps)
		if err != nil {
			b.Fatal(err)
		}
		tags = append(tags, img.Tag)
		info, _ := cc.Client.ImageInspect(ctx, img.Tag)
		b.ReportMetric(time.Since(t0).Seconds(), "build-s-claude+"+name)
		b.ReportMetric(float64(info.Size)/1e6, "size-MB-claude+"+name)
	}
}

// BenchmarkProjectImageBuild: a project's image from its devcontainer.json
// and Dockerfile (on the OS base, a RUN step no earlier build cached),
// cold (the project's build and the runtime's layer, the runtime's claude
// image already there), against the same Ensure again once built (no
// build: two inspects and the layer's recipe), median of 5.
func BenchmarkProjectImageBuild(b *testing.B) {
	im, _, _ := newImages(b)
	im.BaseImage, im.Fresh = testkit.WorkerBaseImage(), -1
	p := &Projects{Builder: im, Allowed: []string{testkit.OSBaseImage()}}
	ctx := context.Background()
	if _, err := im.EnsureImage(ctx, protocol.AgentClaude, nil); err != nil {
		b.Fatal(err)
	}
	pi := &protocol.ProjectImage{
		Devcontainer: `{"build": {"dockerfile": "Dockerfile"}, "containerEnv": {"MODE": "bench"}, "postCreateCommand": "projtool > /etc/projtool.log"}`,
		Dockerfile: fmt.Sprintf("FROM %s\nLABEL bench.mark=%d\nRUN printf '#!/bin/sh\\necho projtool\\n' > /usr/local/bin/projtool && chmod 0755 /usr/local/bin/projtool\n",
			testkit.OSBaseImage(), time.Now().UnixNano()),
	}
	t0 := time.Now()
	img, err := p.Ensure(ctx, protocol.AgentClaude, nil, pi, nil)
	if err != nil {
		b.Fatal(err)
	}
	cold := time.Since(t0)
	b.Cleanup(func() { testkit.RemoveImageAndTagsUnder(img.Tag, ProjectRepository+":") })
	var cached []float64
	for i := 0; i < 5; i++ {
		t0 = time.Now()
		again, err := p.Ensure(ctx, protocol.AgentClaude, nil, pi, nil)
		if err != nil || again.Built || again.Tag != img.Tag {
			b.Fatalf("again %+v, %v: want the image built before", again, err)
		}
		cached = append(cached, float64(time.Since(t0).Microseconds())/1000)
	}
	slices.Sort(cached)
	b.ReportMetric(float64(cold.Milliseconds()), "project-build-cold-ms")
	b.ReportMetric(cached[len(cached)/2], "project-build-cached-median-ms")
}
