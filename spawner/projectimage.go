package spawner

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/images"
)

// workerImage returns the image of spec for worker id, built when
// missing: the runtime's recipe on worker-base, or, for a spec with a
// project image, the project's own (projectImages). A failure of the
// runtime's own image is INTERNAL_ERROR.
func (in *instances) workerImage(ctx context.Context, id string, spec protocol.WorkerSpec) (images.Image, error) {
	if spec.Image != nil {
		return in.projects.ensure(ctx, id, spec)
	}
	img, err := in.images.EnsureImage(ctx, spec.AgentType, spec.Capabilities)
	if err != nil {
		return images.Image{}, &Error{Code: protocol.CodeInternalError, Err: err}
	}
	return img, nil
}

// projectImages are the workers' images on their projects' own: the
// project's image with the runtime's layer on it, whose build log reaches
// the create's consumer as image_build lifecycle events of the worker.
type projectImages struct {
	*env
	projects *images.Projects
}

func newProjectImages(e *env, builder *images.Builder, cfg Config) *projectImages {
	if builder == nil {
		return nil
	}
	return &projectImages{env: e, projects: &images.Projects{Builder: builder, Allowed: cfg.ProjectBases, Timeout: cfg.ProjectBuildTimeout}}
}

// ensure returns the image of spec's project image for worker id. One
// outside the operator's allowlist fails with IMAGE_NOT_ALLOWED, a failed
// build of one with IMAGE_BUILD_FAILED.
func (w *projectImages) ensure(ctx context.Context, id string, spec protocol.WorkerSpec) (images.Image, error) {
	if w == nil || w.projects == nil {
		return images.Image{}, errorf(protocol.CodeImageNotAllowed, "this manager builds no project images")
	}
	p := &buildProgress{env: w.env, ctx: context.WithoutCancel(ctx), id: id, start: time.Now()}
	img, err := w.projects.Ensure(ctx, spec.AgentType, spec.Capabilities, spec.Image, p.line)
	p.flush(img.Built || err != nil, err)
	var na *images.NotAllowedError
	var be *images.BuildError
	switch {
	case errors.As(err, &na):
		return images.Image{}, &Error{Code: protocol.CodeImageNotAllowed, Err: err}
	case errors.As(err, &be):
		return images.Image{}, &Error{Code: protocol.CodeImageBuildFailed, Err: err}
	case err != nil:
		return images.Image{}, &Error{Code: protocol.CodeInternalError, Err: err}
	}
	if img.Built {
		w.log.Info("project image built", "worker_id", id, "image", img.Tag, "took", time.Since(p.start))
	}
	return img, nil
}

// buildProgress publishes a build's log as image_build events: the lines
// gathered since the last event, one event at each new step of the
// build and at most one a second between steps, so that a chatty build
// does not flood the lifecycle stream.
type buildProgress struct {
	*env
	ctx   context.Context
	id    string
	start time.Time

	mu    sync.Mutex // the build's reader calls line; flush is called after it
	phase string
	tag   string
	lines []string
	last  time.Time
}

// maxEventLines bounds the lines one image_build event carries (the
// latest are kept).
const maxEventLines = 50

func (p *buildProgress) line(phase, tag, line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if phase != p.phase || strings.HasPrefix(line, "Step ") {
		p.publish(nil)
	}
	p.phase, p.tag = phase, tag
	p.lines = append(p.lines, line)
	if len(p.lines) > maxEventLines {
		p.lines = p.lines[len(p.lines)-maxEventLines:]
	}
	if time.Since(p.last) >= time.Second {
		p.publish(nil)
	}
}

// flush publishes what is left and, when something was built (or failed
// to be), the build's last event: done, with its time and error.
func (p *buildProgress) flush(final bool, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !final {
		p.publish(nil)
		return
	}
	done := map[string]any{"done": true, "took_ms": time.Since(p.start).Milliseconds()}
	if err != nil {
		done["error"] = err.Error()
	}
	p.publish(done)
}

// publish sends the lines gathered (and extra); nothing when there is
// neither. The caller holds mu.
func (p *buildProgress) publish(extra map[string]any) {
	if len(p.lines) == 0 && extra == nil {
		return
	}
	detail := map[string]any{"phase": p.phase, "image": p.tag}
	if len(p.lines) > 0 {
		detail["lines"] = p.lines
	}
	for k, v := range extra {
		detail[k] = v
	}
	p.lifecycle(p.ctx, p.id, protocol.EventImageBuild, detail)
	p.lines, p.last = nil, time.Now()
}
