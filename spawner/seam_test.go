package spawner

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The Docker SDK stays behind the engine seam: only the Docker engine
// (engine/docker) and the image builder (images/) import it, so
// a second engine is one more implementation of engine.Engine and nothing
// above it changes. Test files may use it (they drive a real engine).
func TestOnlyTheDockerEngineAndTheImageBuilderImportDocker(t *testing.T) {
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		if strings.HasPrefix(path, filepath.Join("engine", "docker")+string(filepath.Separator)) || strings.HasPrefix(path, "images"+string(filepath.Separator)) {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); strings.HasPrefix(p, "github.com/docker/docker/") {
				t.Errorf("%s imports %s: engine calls go through engine.Engine (spawner/engine)", path, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The Kubernetes API's packages stay behind the seam too: only the
// Kubernetes engine imports them, so that nothing else of the spawner
// (workerctl, the dashboard, the library's own tests) compiles and links
// client-go. The worker-manager imports the engine, not them.
func TestOnlyTheKubernetesEngineImportsKubernetes(t *testing.T) {
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		if strings.HasPrefix(path, filepath.Join("engine", "kubernetes")+string(filepath.Separator)) {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); strings.HasPrefix(p, "k8s.io/") {
				t.Errorf("%s imports %s: Kubernetes calls go through engine.Engine (spawner/engine/kubernetes)", path, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The spawner's parts (engine and its implementations, images, ops, the
// dashboard, the internal packages) never import the spawner package
// itself: the arrows point from the manager down to its parts, and the
// manager (wire.go) assembles them. The programs (cmd/) and the test
// harness (spawnertest) sit above it and may.
func TestPartsDoNotImportTheSpawner(t *testing.T) {
	const self = "github.com/agentvisor/agentvisor/spawner"
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || filepath.Dir(path) == "." {
			return err
		}
		if top := strings.Split(path, string(filepath.Separator))[0]; top == "cmd" || top == "spawnertest" {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == self {
				t.Errorf("%s imports the spawner package: a part gets what it needs through its constructor", path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
