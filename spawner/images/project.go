package images

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/errdefs"
	"golang.org/x/sync/singleflight"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/internal/ctlplane"
)

// ProjectRepository is the repository of the images a project's own
// Dockerfile makes (worker-project:<hash>), before the runtime's layer.
const ProjectRepository = "worker-project"

// Projects makes worker images on a project's own image
// (protocol.ProjectImage): the project's Dockerfile, when it has one, is
// built as it is, then the runtime's layer puts the wrapper and the agent
// on it, copied out of the runtime's own images (which Builder makes on
// worker-base as for any worker). Every build that runs a step of the
// project's runs with no network: the project's files are as hostile as
// the agent, and its steps must reach nothing of the host. Both images
// are named by hashes of what they are built from, so an unchanged
// Dockerfile on unchanged bases reuses them and any change makes new ones.
type Projects struct {
	Builder *Builder
	// Allowed are the base images a project may name (PROJECT_IMAGE_BASES):
	// a reference as written (a name without a tag is name:latest), or a
	// prefix ending in "*". None: every project image is refused.
	Allowed []string
	// Timeout bounds one build (PROJECT_IMAGE_BUILD_TIMEOUT; default 10 min).
	Timeout time.Duration

	group singleflight.Group // concurrent builds of one image run once
}

// NotAllowedError is a project image naming a base the operator does not
// allow.
type NotAllowedError struct{ Ref string }

func (e *NotAllowedError) Error() string {
	return fmt.Sprintf("spawner: image %s is not one PROJECT_IMAGE_BASES allows", e.Ref)
}

// BuildLine is a line of a project image's build log, for the create's
// progress: phase is "project" (the project's Dockerfile) or "layer" (the
// runtime's layer on it).
type BuildLine func(phase, tag, line string)

// projectInputs are what a project image is made of, once the spec is read.
type projectInputs struct {
	base       string // the image the project's part starts from, when it has no Dockerfile
	dockerfile string
	args       map[string]string
	target     string
	env        map[string]string
	user       string
	commands   []protocol.DevCommand
}

func readProjectImage(pi *protocol.ProjectImage) (projectInputs, error) {
	in := projectInputs{base: pi.Base, dockerfile: pi.Dockerfile, args: map[string]string{}}
	for k, v := range pi.BuildArgs {
		in.args[k] = v
	}
	if pi.Devcontainer == "" {
		return in, nil
	}
	dc, err := protocol.ParseDevcontainer(pi.Devcontainer)
	if err != nil {
		return projectInputs{}, err
	}
	in.base, in.target, in.env, in.user, in.commands = dc.Image, dc.Build.Target, dc.ContainerEnv, dc.RemoteUser, dc.Commands
	for k, v := range dc.Build.Args {
		in.args[k] = v
	}
	return in, nil
}

func (p *Projects) timeout() time.Duration {
	if p.Timeout <= 0 {
		return 10 * time.Minute
	}
	return p.Timeout
}

// allowed reports whether ref is one of the operator's base images.
func (p *Projects) allowed(ref string) bool {
	norm := func(r string) string {
		if i := strings.LastIndex(r, "/"); !strings.Contains(r[i+1:], ":") && !strings.Contains(r, "@") {
			return r + ":latest"
		}
		return r
	}
	for _, a := range p.Allowed {
		if prefix, ok := strings.CutSuffix(a, "*"); ok && strings.HasPrefix(ref, prefix) || norm(a) == norm(ref) {
			return true
		}
	}
	return false
}

// Ensure returns the worker image of agent and caps on the project's
// image pi, building what is missing; onLine (nil: none) is told of the
// build's log lines. A base outside Allowed is a *NotAllowedError; a
// failed build a *BuildError. The capabilities a project image offers
// are its own: their commands must be in the project's image (the layer
// checks them and fails without; DOCKER's podman it configures).
func (p *Projects) Ensure(ctx context.Context, agent protocol.AgentType, caps []protocol.Capability, pi *protocol.ProjectImage, onLine BuildLine) (Image, error) {
	in, err := readProjectImage(pi)
	if err != nil {
		return Image{}, err
	}
	caps, err = protocol.NormalizeCapabilities(caps)
	if err != nil {
		return Image{}, err
	}
	refs := []string{in.base}
	if in.dockerfile != "" {
		if refs, err = DockerfileImages(in.dockerfile); err != nil {
			return Image{}, &BuildError{Tag: ProjectRepository, Err: err}
		}
	}
	ids := make([]string, len(refs))
	for i, ref := range refs {
		if !p.allowed(ref) {
			return Image{}, &NotAllowedError{Ref: ref}
		}
		got, err := p.inspect(ctx, ref)
		if err != nil {
			return Image{}, &BuildError{Tag: ref, Err: fmt.Errorf("base image %s is not on this host's engine (no registry is asked: load it, `docker load`): %w", ref, err)}
		}
		ids[i] = ref + "=" + got
	}
	from := in.base
	if in.dockerfile != "" {
		if from, err = p.project(ctx, in, ids, onLine); err != nil {
			return Image{}, err
		}
	}
	fromID, err := p.inspect(ctx, from)
	if err != nil {
		return Image{}, &BuildError{Tag: from, Err: err}
	}
	if err := checkImageEnv(ctx, p, from); err != nil {
		return Image{}, err
	}
	agentImg := ""
	if agent != protocol.AgentACP {
		img, err := p.Builder.EnsureImage(ctx, agent, nil)
		if err != nil {
			return Image{}, err
		}
		agentImg = img.Tag
	}
	r, err := p.Builder.Recipe(ctx, agent, caps)
	if err != nil {
		return Image{}, err
	}
	r.Project = layerHash(fromID, in)
	hash, err := r.Hash()
	if err != nil {
		return Image{}, err
	}
	tag := protocol.ImageRepository + ":" + hash
	df, err := layerDockerfile(r, from, p.Builder.base(), agentImg, in)
	if err != nil {
		return Image{}, err
	}
	canonical, _ := r.Canonical()
	img, err := p.once(ctx, tag, hash, "layer", df, nil, "", onLine, map[string]string{
		ctlplane.LabelRecipe: canonical, ctlplane.LabelRecipeHash: hash, ctlplane.LabelAgentType: string(agent),
		ctlplane.LabelCapabilities: capNames(caps),
	})
	if err != nil {
		return Image{}, err
	}
	// Their use recorded, the image GC removes them once unused (the
	// project's own image after the workers' images on it).
	p.Builder.touch(ctx, img.Tag)
	if in.dockerfile != "" {
		p.Builder.touch(ctx, from)
	}
	return img, nil
}

// project builds the project's own Dockerfile (or finds it built) and
// returns its tag.
func (p *Projects) project(ctx context.Context, in projectInputs, ids []string, onLine BuildLine) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "agentvisor-project-image\nversion=%d\ntarget=%s\n", protocol.RecipeVersion, in.target)
	for _, id := range ids {
		fmt.Fprintf(h, "from=%s\n", id)
	}
	args := make([]string, 0, len(in.args))
	for k, v := range in.args {
		args = append(args, k+"="+v)
	}
	slices.Sort(args)
	for _, a := range args {
		fmt.Fprintf(h, "arg=%q\n", a)
	}
	fmt.Fprintf(h, "dockerfile=%q\n", in.dockerfile)
	hash := hex.EncodeToString(h.Sum(nil))[:protocol.HashLen]
	tag := ProjectRepository + ":" + hash
	_, err := p.once(ctx, tag, hash, "project", in.dockerfile, in.args, in.target, onLine, nil)
	return tag, err
}

// once returns the image tag, building it from dockerfile (no network,
// an empty context) when it is missing; concurrent calls share one build.
func (p *Projects) once(ctx context.Context, tag, hash, phase, dockerfile string, args map[string]string, target string, onLine BuildLine, labels map[string]string) (Image, error) {
	v, err, shared := p.group.Do(tag, func() (any, error) {
		if id, err := p.inspect(ctx, tag); err == nil {
			return Image{Tag: tag, ID: id, Hash: hash}, nil
		} else if !errdefs.IsNotFound(err) {
			return nil, fmt.Errorf("spawner: inspect %s: %w", tag, err)
		}
		all := map[string]string{protocol.LabelManaged: "true", ctlplane.LabelProjectPhase: phase}
		for k, v := range labels {
			all[k] = v
		}
		buildArgs := map[string]*string{}
		for k, v := range args {
			buildArgs[k] = &v
		}
		var line func(string)
		if onLine != nil {
			line = func(s string) { onLine(phase, tag, s) }
		}
		start := time.Now()
		img, err := p.Builder.run(ctx, p.timeout(), map[string][]byte{"Dockerfile": []byte(dockerfile)}, build.ImageBuildOptions{
			Tags: []string{tag}, NetworkMode: "none", BuildArgs: buildArgs, Target: target, Labels: all,
		}, line)
		if p.Builder.OnBuild != nil && phase == "layer" {
			p.Builder.OnBuild(protocol.AgentType(labels[ctlplane.LabelAgentType]), time.Since(start), err)
		}
		img.Hash = hash
		return img, err
	})
	if err != nil {
		return Image{}, err
	}
	img := v.(Image)
	if shared {
		img.Built = false
	}
	return img, nil
}

func (p *Projects) inspect(ctx context.Context, ref string) (string, error) {
	ictx, cancel := context.WithTimeout(ctx, p.Builder.timeout())
	defer cancel()
	got, err := p.Builder.Docker.ImageInspect(ictx, ref)
	if err != nil {
		return "", err
	}
	return got.ID, nil
}

// checkImageEnv refuses a project image whose own environment sets a
// variable of the runtime's (an ENV ALLOWED_COMMANDS=* of its Dockerfile
// would otherwise widen what the manager decided for a spec that sets
// none).
func checkImageEnv(ctx context.Context, p *Projects, ref string) error {
	ictx, cancel := context.WithTimeout(ctx, p.Builder.timeout())
	defer cancel()
	got, err := p.Builder.Docker.ImageInspect(ictx, ref)
	if err != nil {
		return &BuildError{Tag: ref, Err: err}
	}
	if got.Config == nil {
		return nil
	}
	for _, kv := range got.Config.Env {
		name, _, _ := strings.Cut(kv, "=")
		if name != "HOME" && !protocol.ProjectEnvAllowed(name) {
			return &BuildError{Tag: ref, Err: fmt.Errorf("the project's image sets %s, a variable of the runtime's", name)}
		}
	}
	return nil
}

// layerHash is the recipe's project line: the project image's ID and what
// the layer adds of a devcontainer.
func layerHash(fromID string, in projectInputs) string {
	doc, _ := json.Marshal(struct {
		From     string                `json:"from"`
		Env      map[string]string     `json:"env"` // encoding/json sorts the keys
		User     string                `json:"user"`
		Commands []protocol.DevCommand `json:"commands"`
	}{fromID, in.env, in.user, in.commands})
	sum := sha256.Sum256(doc)
	return hex.EncodeToString(sum[:])[:protocol.HashLen]
}

// capabilityCommands are the commands a capability needs in a project's
// image, which the runtime does not install there.
var capabilityCommands = map[protocol.Capability]string{
	protocol.CapGit: "git", protocol.CapGitHubCLI: "gh", protocol.CapCurl: "curl",
	protocol.CapDocker: "podman", // configured by the runtime (dockerSetup)
}

// layerDockerfile is the runtime's layer on a project's image from: the
// devcontainer's environment and creation commands, then the wrapper
// (from worker-base, wrapperImg) and the agent (from agentImg, the
// runtime's image of it; "" for an acp worker, whose project image
// brings its agent), a uid 1000 user with its home, and the wrapper as
// the entrypoint. Its steps need no network and have none.
func layerDockerfile(r protocol.Recipe, from, wrapperImg, agentImg string, in projectInputs) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "# generated by the agentvisor spawner from recipe version %d; do not edit\n", protocol.RecipeVersion)
	fmt.Fprintf(&b, "FROM %s\nUSER root\n", from)
	keys := make([]string, 0, len(in.env))
	for k := range in.env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "ENV %s=%s\n", k, dockerfileQuote(in.env[k]))
	}
	if len(in.commands) > 0 {
		if in.user != "" {
			fmt.Fprintf(&b, "USER %s\n", in.user)
		}
		for _, c := range in.commands {
			args := c.Args
			if c.Shell != "" {
				args = []string{"/bin/sh", "-c", c.Shell}
			}
			doc, _ := json.Marshal(args)
			fmt.Fprintf(&b, "RUN %s\n", doc)
		}
		b.WriteString("USER root\n")
	}
	// The wrapper's and the agent's directories belong to root and no one
	// else may write them (nor a directory above them): a project image
	// that left them to uid 1000 would let the agent swap the wrapper's
	// binary for the next time it executes itself.
	harden := []string{"set -e",
		`for d in /usr/local/bin /opt/agentvisor; do [ ! -L "$d" ] || { echo "$d is a symbolic link in the project's image" >&2; exit 1; }; done`,
		"mkdir -p /usr/local/bin /opt/agentvisor",
		"chown root:root / /usr /usr/local /usr/local/bin /opt /opt/agentvisor",
		"chmod go-w / /usr /usr/local /usr/local/bin /opt /opt/agentvisor",
	}
	doc, _ := json.Marshal([]string{"/bin/sh", "-c", strings.Join(harden, "\n")})
	fmt.Fprintf(&b, "RUN %s\n", doc)
	fmt.Fprintf(&b, "COPY --from=%s /usr/local/bin/worker-wrapper /usr/local/bin/worker-wrapper\n", wrapperImg)
	fmt.Fprintf(&b, "COPY --from=%s /etc/ssl/certs/ca-certificates.crt /opt/agentvisor/ca-certificates.crt\n", wrapperImg)
	if agentImg != "" {
		pkg, ok := agentPackages[r.Agent]
		if !ok {
			return "", fmt.Errorf("spawner: no agent package for %q", r.Agent)
		}
		if pkg.node == nil {
			fmt.Fprintf(&b, "COPY --from=%s /usr/local/bin/%s /usr/local/bin/%s\n", agentImg, r.Agent, r.Agent)
		} else {
			dir := "/opt/agentvisor/" + string(r.Agent)
			fmt.Fprintf(&b, "COPY --from=%s /usr/local/bin/node /usr/local/bin/node\n", agentImg)
			fmt.Fprintf(&b, "COPY --from=%s %s %s\n", agentImg, dir, dir)
			fmt.Fprintf(&b, "RUN [\"ln\", \"-sf\", \"%s/%s\", \"/usr/local/bin/%s\"]\n", dir, pkg.binary, r.Agent)
		}
	}
	// The worker's user and directories as worker-base has them, made
	// with what any base has (no useradd on a minimal image); the
	// capabilities' commands checked, never installed.
	setup := []string{"set -e",
		`grep -q '^[^:]*:[^:]*:1000:' /etc/passwd || echo 'worker:x:1000:1000:worker:/home/worker:/bin/sh' >> /etc/passwd`,
		`grep -q '^[^:]*:[^:]*:1000:' /etc/group || echo 'worker:x:1000:' >> /etc/group`,
		"mkdir -p /home/worker /workspace && chown 1000:1000 /home/worker /workspace",
		"[ -e /etc/ssl/certs/ca-certificates.crt ] || { mkdir -p /etc/ssl/certs && cp /opt/agentvisor/ca-certificates.crt /etc/ssl/certs/; }",
	}
	for _, c := range r.Capabilities {
		if cmd, ok := capabilityCommands[c]; ok {
			setup = append(setup, fmt.Sprintf(`command -v %s >/dev/null || { echo "capability %s needs %s in the project's image" >&2; exit 1; }`, cmd, c, cmd))
		}
		if c == protocol.CapDocker {
			setup = append(setup, dockerSetup()...)
			setup = append(setup, `command -v docker >/dev/null || ln -s "$(command -v podman)" /usr/local/bin/docker`)
		}
	}
	doc, _ = json.Marshal([]string{"/bin/sh", "-c", strings.Join(setup, "\n")})
	fmt.Fprintf(&b, "RUN %s\n", doc)
	b.WriteString("ENV HOME=/home/worker WORKSPACE=/workspace\nWORKDIR /workspace\nUSER 1000:1000\n")
	b.WriteString("ENTRYPOINT [\"/usr/local/bin/worker-wrapper\"]\nCMD []\n")
	return b.String(), nil
}

// dockerfileQuote quotes an ENV value: double quotes, with backslashes,
// quotes and dollars escaped (no variable is expanded) and line breaks
// refused by the spec's check already.
func dockerfileQuote(v string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, `$`, `\$`, "\n", `\n`)
	return `"` + r.Replace(v) + `"`
}

// DockerfileImages returns the images a Dockerfile's FROM and COPY --from
// lines name (stages it names itself left out), in order. A reference
// made of build arguments cannot be checked against the allowlist and is
// refused, as is a parser directive that changes the escape character.
func DockerfileImages(text string) ([]string, error) {
	var refs []string
	stages := map[string]bool{}
	add := func(ref string) error {
		if strings.Contains(ref, "$") {
			return fmt.Errorf("image %q is made of build arguments: name the image itself", ref)
		}
		if stages[strings.ToLower(ref)] || ref == "scratch" {
			return nil
		}
		if !slices.Contains(refs, ref) {
			refs = append(refs, ref)
		}
		return nil
	}
	for _, line := range dockerfileLines(text) {
		low := strings.ToLower(line)
		if strings.HasPrefix(low, "#") {
			if strings.Contains(strings.ReplaceAll(low, " ", ""), "escape=") {
				return nil, errors.New("the escape parser directive is not supported")
			}
			continue
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch strings.ToUpper(f[0]) {
		case "FROM":
			args := f[1:]
			for len(args) > 0 && strings.HasPrefix(args[0], "--") {
				args = args[1:]
			}
			if len(args) == 0 {
				return nil, errors.New("a FROM names no image")
			}
			if err := add(args[0]); err != nil {
				return nil, err
			}
			if len(args) >= 3 && strings.EqualFold(args[1], "as") {
				stages[strings.ToLower(args[2])] = true
			}
		case "COPY", "ADD":
			for _, a := range f[1:] {
				if v, ok := strings.CutPrefix(a, "--from="); ok {
					if _, err := fmt.Sscanf(v, "%d", new(int)); err == nil {
						continue // a stage by its index
					}
					if err := add(v); err != nil {
						return nil, err
					}
				}
			}
		}
	}
	if len(refs) == 0 {
		return nil, errors.New("the Dockerfile has no FROM")
	}
	return refs, nil
}

// dockerfileLines are a Dockerfile's instructions, their continuation
// lines joined; comments are lines of their own.
func dockerfileLines(text string) []string {
	var out []string
	var cur strings.Builder
	for _, raw := range strings.Split(text, "\n") {
		line := strings.TrimSpace(raw)
		if cur.Len() == 0 && strings.HasPrefix(line, "#") {
			out = append(out, line)
			continue
		}
		if cur.Len() > 0 && strings.HasPrefix(line, "#") {
			continue // a comment inside a continued instruction
		}
		if body, ok := strings.CutSuffix(line, `\`); ok {
			cur.WriteString(body + " ")
			continue
		}
		cur.WriteString(line)
		out = append(out, cur.String())
		cur.Reset()
	}
	if cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}

func capNames(caps []protocol.Capability) string {
	names := make([]string, len(caps))
	for i, c := range caps {
		names[i] = string(c)
	}
	return strings.Join(names, ",")
}
