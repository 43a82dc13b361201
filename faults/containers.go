package faults

import (
	"context"
	"os/exec"
	"strings"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

// DockerTimeout bounds every docker CLI call of the harness but builds and
// the events stream.
const DockerTimeout = 60 * time.Second

// docker runs the docker CLI with a timeout and returns its combined
// output.
func docker(args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), DockerTimeout)
	defer cancel()
	return exec.CommandContext(ctx, "docker", args...).CombinedOutput()
}

// Container is a labelled container of the case.
type Container struct {
	ID, State, WorkerID string
	// Host is the fleet host whose engine holds it ("" for the default
	// engine).
	Host string
}

// Containers lists the containers labelled with the case's key prefix,
// whatever their state, on the default engine and on every running
// engine of the case's fleet.
func (c *Case) Containers() []Container {
	args := []string{"ps", "-a", "--no-trunc", "--filter", "label=" + protocol.LabelKeyPrefix + "=" + c.Prefix,
		"--format", `{{.ID}}	{{.State}}	{{.Label "` + protocol.LabelWorkerID + `"}}`}
	out, err := docker(args...)
	if err != nil {
		c.T.Errorf("docker ps: %v", err)
		return nil
	}
	cs := parseContainers(out, "")
	for _, h := range c.fleetHosts() {
		if !h.Engine.Running() {
			continue
		}
		out, err := h.Engine.Docker(args...)
		if err != nil {
			c.T.Errorf("docker ps on %s: %v", h.ID, err)
			continue
		}
		cs = append(cs, parseContainers(out, h.ID)...)
	}
	return cs
}

func parseContainers(out []byte, host string) []Container {
	var cs []Container
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Split(line, "\t"); len(f) == 3 {
			cs = append(cs, Container{ID: f[0], State: f[1], WorkerID: f[2], Host: host})
		}
	}
	return cs
}

// RemoveContainer removes a container of the case, on its engine.
func (c *Case) RemoveContainer(x Container) {
	if x.Host == "" {
		_, _ = docker("rm", "-f", x.ID)
		return
	}
	for _, h := range c.fleetHosts() {
		if h.ID == x.Host {
			_, _ = h.Engine.Docker("rm", "-f", x.ID)
		}
	}
}

// ContainerOf returns the container of a worker ("" when none).
func (c *Case) ContainerOf(worker string) string {
	for _, x := range c.Containers() {
		if x.WorkerID == worker {
			return x.ID
		}
	}
	return ""
}

// Docker runs a docker command and fails the test when it fails.
func (c *Case) Docker(args ...string) string {
	c.T.Helper()
	out, err := docker(args...)
	if err != nil {
		c.T.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// SweepStale removes the containers of fault cases (key prefix "faults-")
// created more than an hour ago: what a test binary killed by its timeout
// left behind. A younger one may belong to a suite running right now in
// another checkout, and is left alone.
func SweepStale() {
	out, err := docker("ps", "-a", "--no-trunc", "--filter", "label="+protocol.LabelManaged+"=true",
		"--format", `{{.ID}}	{{.Label "`+protocol.LabelKeyPrefix+`"}}	{{.Label "`+protocol.LabelCreatedAt+`"}}`)
	if err != nil {
		return
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 3 || !strings.HasPrefix(f[1], "faults-") {
			continue
		}
		if at, err := protocol.ParseTime(f[2]); err == nil && time.Since(at) > time.Hour {
			_, _ = docker("rm", "-f", f[0])
		}
	}
}
