package testkit

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// Root returns the repository's top directory: the nearest directory at or
// above the working directory that holds testkit/go.mod, else the one this
// source file sits under (a program run from elsewhere).
func Root() string {
	if dir, err := os.Getwd(); err == nil {
		for d := dir; ; d = filepath.Dir(d) {
			if _, err := os.Stat(filepath.Join(d, "testkit", "go.mod")); err == nil {
				return d
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

// BuildSecret is in the environment of every build WorkerImages runs: a
// test may look for it in the images, where it must not be.
const BuildSecret = "sk-ant-test-0000-DO-NOT-BAKE-1234567890"

// OSBaseImage and WorkerBaseImage are the images images/build-base.sh and
// images/build-worker-base.sh make, under the tags their environment
// (OS_BASE_IMAGE, WORKER_BASE_IMAGE) names.
func OSBaseImage() string { return envOr("OS_BASE_IMAGE", "agentvisor/os-base:bookworm") }

// WorkerBaseImage: see OSBaseImage.
func WorkerBaseImage() string { return envOr("WORKER_BASE_IMAGE", "agentvisor/worker-base:latest") }

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

var workerImages struct {
	sync.Mutex
	built bool
}

// WorkerImages makes sure the OS base and worker-base images of this
// checkout are there: the first call of a test binary builds them with
// their scripts (the OS base only when missing, worker-base with this
// checkout's wrapper), a later one again only when one is gone. It takes
// the engine's shared lock (RequireDocker) and fails the test when a build
// fails.
func WorkerImages(t testing.TB) {
	t.Helper()
	RequireDocker(t)
	workerImages.Lock()
	defer workerImages.Unlock()
	if workerImages.built && imageExists(OSBaseImage()) && imageExists(WorkerBaseImage()) {
		return
	}
	for _, script := range []string{"build-base.sh", "build-worker-base.sh"} {
		if err := runScript(filepath.Join(Root(), "images", script)); err != nil {
			t.Fatal(err)
		}
	}
	workerImages.built = true
}

func runScript(path string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", path)
	cmd.Env = append(os.Environ(), "ANTHROPIC_API_KEY="+BuildSecret)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %v\n%s", filepath.Base(path), err, out)
	}
	return nil
}

func imageExists(tag string) bool {
	_, err := docker("image", "inspect", "-f", "{{.Id}}", tag)
	return err == nil
}

// FakeAgentBin is where the wrapper's fake agent (a Go program that prints
// Claude's stream-json without a model) sits in a FakeAgentImage.
const FakeAgentBin = "/usr/local/bin/fake-agent"

// BuildFakeAgentImage builds tag as worker-base is built
// (images/worker-base/Dockerfile on the OS base, with this checkout's
// static wrapper) plus the fake agent at FakeAgentBin, labelled
// io.agentvisor.image=name. It builds the OS base first when it is
// missing. It is a function of its own, not of the test, so that programs
// (the fault suite's fleet) build the image too.
func BuildFakeAgentImage(tag, name string) error {
	root := Root()
	if err := runScript(filepath.Join(root, "images", "build-base.sh")); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "agentvisor-fake-agent-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	for _, b := range []struct{ pkg, out string }{
		{"./cmd/worker-wrapper", "worker-wrapper"},
		{"./internal/fakeagent", "fake-agent"},
	} {
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(dir, b.out), b.pkg)
		cmd.Dir, cmd.Env = filepath.Join(root, "wrapper"), append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %v\n%s", b.pkg, err, out)
		}
	}
	df, err := os.ReadFile(filepath.Join(root, "images", "worker-base", "Dockerfile"))
	if err != nil {
		return err
	}
	df = append(df, []byte("\nCOPY fake-agent "+FakeAgentBin+"\nLABEL io.agentvisor.image="+name+"\n")...)
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), df, 0o644); err != nil {
		return err
	}
	return DockerBuild(dir, tag)
}

// DockerBuild builds the context directory dir as tag with the legacy
// builder (no buildx plugin needed) on the host network, in 10 minutes at
// most.
func DockerBuild(dir, tag string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker", "build", "-q", "--network", "host", "-t", tag, dir)
	cmd.Env = append(os.Environ(), "DOCKER_BUILDKIT=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("docker build %s: %v\n%s", tag, err, out)
	}
	return nil
}

// BuildFrom builds tag as a one-line derivative of the image from: FROM it
// plus the given LABEL pairs (k=v ...), which give it an image ID of its
// own. The image is removed when the test ends.
func BuildFrom(t testing.TB, from, tag string, labels ...string) {
	t.Helper()
	dir := t.TempDir()
	df := "FROM " + from + "\n"
	for _, l := range labels {
		df += "LABEL " + l + "\n"
	}
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(df), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := DockerBuild(dir, tag); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = docker("rmi", "-f", tag) })
}

// RemoveImagesLabelled removes, when the test ends, every image carrying
// label (k=v), the untagged ones a failed build left included, children
// before their parents.
func RemoveImagesLabelled(t testing.TB, label string) {
	t.Cleanup(func() {
		for pass := 0; pass < 5; pass++ {
			out, err := docker("image", "ls", "-aq", "--filter", "label="+label)
			ids := strings.Fields(out)
			if err != nil || len(ids) == 0 {
				return
			}
			_, _ = docker(append([]string{"rmi"}, ids...)...)
		}
	})
}

// TagsUnder returns the tags starting with prefix of the image's layers
// (image itself and its parents, from docker history): the images an
// image was built FROM, such as a project's image under a worker image.
func TagsUnder(image, prefix string) ([]string, error) {
	hist, err := exec.Command("docker", "history", "-q", image).Output()
	if err != nil {
		return nil, fmt.Errorf("docker history %s: %w", image, err)
	}
	var out []string
	for _, id := range strings.Fields(string(hist)) {
		tags, _ := exec.Command("docker", "image", "inspect", "-f", `{{join .RepoTags " "}}`, id).Output()
		for _, tag := range strings.Fields(string(tags)) {
			if strings.HasPrefix(tag, prefix) {
				out = append(out, tag)
			}
		}
	}
	return out, nil
}

// RemoveImageAndTagsUnder removes an image, then the images under it
// tagged with prefix (TagsUnder), as a test's cleanup: errors are ignored.
func RemoveImageAndTagsUnder(image, prefix string) {
	under, _ := TagsUnder(image, prefix)
	_ = exec.Command("docker", "rmi", image).Run()
	for _, tag := range under {
		_ = exec.Command("docker", "rmi", tag).Run()
	}
}
