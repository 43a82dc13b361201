package protocol

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Capability is a tool a worker image provides on top of the base.
type Capability string

const (
	CapGit       Capability = "GIT"        // git
	CapGitHubCLI Capability = "GITHUB_CLI" // gh
	CapCurl      Capability = "CURL"       // curl
	CapDocker    Capability = "DOCKER"     // an engine of the worker's own: rootless Podman behind the docker command
)

// Capabilities lists every capability, sorted.
var Capabilities = []Capability{CapCurl, CapDocker, CapGit, CapGitHubCLI}

// Valid reports whether c is a known capability, spelt canonically.
func (c Capability) Valid() bool { return slices.Contains(Capabilities, c) }

// ParseCapability accepts a capability name case-insensitively.
func ParseCapability(s string) (Capability, error) {
	c := Capability(strings.ToUpper(strings.TrimSpace(s)))
	if !c.Valid() {
		return "", fmt.Errorf("protocol: unknown capability %q (want one of GIT, GITHUB_CLI, CURL, DOCKER)", s)
	}
	return c, nil
}

// NormalizeCapabilities returns caps sorted and without duplicates, or an
// error for an unknown one. The result never is nil.
func NormalizeCapabilities(caps []Capability) ([]Capability, error) {
	out := make([]Capability, 0, len(caps))
	for _, c := range caps {
		p, err := ParseCapability(string(c))
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// RecipeVersion is bumped whenever the way an image is generated from a
// recipe changes, so that no stale image serves a new recipe.
const RecipeVersion = 2

// ImageRepository is the repository of every worker image: worker:<hash>.
const ImageRepository = "worker"

// HashLen is how many hex digits of the SHA-256 name an image.
const HashLen = 16

// Recipe is everything a worker image is built from.
type Recipe struct {
	Agent        AgentType
	Capabilities []Capability
	// BaseImage is the image ID (sha256:...) of the worker-base image the
	// recipe builds on. It changes when the OS base or the wrapper binary
	// changes.
	BaseImage string
	// Version is the recipe generator's version; 0 means RecipeVersion.
	Version int
	// Project, for a worker on a project's own image, is the hash of
	// that image's part (its image ID and what the runtime adds of a
	// devcontainer: environment, user, creation commands); "" for a
	// worker on worker-base.
	Project string
}

// Canonical returns the text the recipe hash is taken of. Its form is fixed
// (spawner/INTERNALS.md, "Image recipe hash"): five lines, each ending in "\n":
//
//	agentvisor-image-recipe
//	version=<decimal>
//	agent=<agent type: claude, droid, codex, opencode, qwen or acp>
//	base=<base image id>
//	capabilities=<sorted unique names joined by ",">
//
// and, for a project's own image only, a sixth, project=<hash>.
func (r Recipe) Canonical() (string, error) {
	if !r.Agent.Valid() {
		return "", fmt.Errorf("protocol: recipe: unknown agent type %q", r.Agent)
	}
	if r.BaseImage == "" || strings.ContainsAny(r.BaseImage, "\n\r") {
		return "", fmt.Errorf("protocol: recipe: base image id %q is empty or has a line break", r.BaseImage)
	}
	caps, err := NormalizeCapabilities(r.Capabilities)
	if err != nil {
		return "", fmt.Errorf("protocol: recipe: %w", err)
	}
	v := r.Version
	if v == 0 {
		v = RecipeVersion
	}
	names := make([]string, len(caps))
	for i, c := range caps {
		names[i] = string(c)
	}
	var b strings.Builder
	b.WriteString("agentvisor-image-recipe\n")
	b.WriteString("version=" + strconv.Itoa(v) + "\n")
	b.WriteString("agent=" + string(r.Agent) + "\n")
	b.WriteString("base=" + r.BaseImage + "\n")
	b.WriteString("capabilities=" + strings.Join(names, ",") + "\n")
	if r.Project != "" {
		if strings.ContainsAny(r.Project, "\n\r") {
			return "", fmt.Errorf("protocol: recipe: project %q has a line break", r.Project)
		}
		b.WriteString("project=" + r.Project + "\n")
	}
	return b.String(), nil
}

// Hash returns the first HashLen hex digits of the SHA-256 of Canonical.
func (r Recipe) Hash() (string, error) {
	text, err := r.Canonical()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(text))
	return hex.EncodeToString(sum[:])[:HashLen], nil
}

// Tag returns the image reference worker:<hash>.
func (r Recipe) Tag() (string, error) {
	h, err := r.Hash()
	if err != nil {
		return "", err
	}
	return ImageRepository + ":" + h, nil
}

// DockerWarning is the warning of a create that asks for DOCKER: the
// worker's containers and images are its own and short-lived.
const DockerWarning = "DOCKER gives the worker an engine of its own (rootless Podman behind the docker command), not the host's: " +
	"its containers have the worker's network and limits, and they and its images live in the worker's memory, " +
	"gone when it hibernates or is deleted"

// DockerStorage is where a DOCKER worker's engine keeps its images and
// containers: a directory of the worker's own memory (a tmpfs the engine
// mounts), since the container's own overlay root cannot hold overlay
// layers.
const DockerStorage = "/var/tmp/inner"

// SpecWarnings are the warnings a create of spec is answered with.
func SpecWarnings(spec WorkerSpec) []string {
	var out []string
	for _, c := range spec.Capabilities {
		if Capability(strings.ToUpper(string(c))) == CapDocker {
			out = append(out, DockerWarning)
			break
		}
	}
	return out
}
