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
