package images

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"

	"github.com/docker/docker/client"
)

// Saver is the part of the Docker client an import into containerd uses.
type Saver interface {
	ImageSave(ctx context.Context, imageIDs []string, opts ...client.ImageSaveOption) (io.ReadCloser, error)
}

var _ Saver = (*client.Client)(nil)

// ContainerdImport returns a function that makes an image of the Docker
// engine available to the containerd of socket (a Kubernetes node's,
// namespace k8s.io), without a registry: `docker save` piped into `ctr
// images import`. An image containerd has already is not imported again.
// It is the Kubernetes engine's LoadImage for a cluster such as `make
// k8s`'s, whose node is this machine.
func ContainerdImport(docker Saver, socket string) func(ctx context.Context, image string) error {
	ctr := func(ctx context.Context, stdin io.Reader, args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, "ctr", append([]string{"--address", socket, "--namespace", "k8s.io"}, args...)...)
		cmd.Stdin = stdin
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return out, fmt.Errorf("ctr %s: %w: %s", args[0]+" "+args[1], err, strings.TrimSpace(stderr.String()))
		}
		return out, nil
	}
	return func(ctx context.Context, image string) error {
		ref := containerdRef(image)
		have, err := ctr(ctx, nil, "images", "ls", "-q", "name=="+ref)
		if err != nil {
			return err
		}
		if strings.TrimSpace(string(have)) == ref {
			return nil
		}
		tar, err := docker.ImageSave(ctx, []string{image})
		if err != nil {
			return fmt.Errorf("docker save %s: %w", image, err)
		}
		defer tar.Close()
		_, err = ctr(ctx, tar, "images", "import", "-")
		return err
	}
}

// containerdRef is the full reference containerd keeps an image under:
// Docker's short names are docker.io's ("worker:abc" is
// docker.io/library/worker:abc).
func containerdRef(image string) string {
	first, _, hasSlash := strings.Cut(image, "/")
	switch {
	case !hasSlash:
		return "docker.io/library/" + image
	case strings.ContainsAny(first, ".:") || first == "localhost":
		return image
	}
	return "docker.io/" + image
}
