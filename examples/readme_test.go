package examples

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentvisor/agentvisor/spawner/spawnertest"
)

// readmeQuickstart returns the first fenced block of lang in a README:
// the quickstart its readers copy, which a test runs as it is written.
func readmeQuickstart(t *testing.T, path, lang string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "\n```"+lang+"\n")
	if !ok {
		t.Fatalf("%s has no ```%s block", path, lang)
	}
	code, _, ok := strings.Cut(rest, "\n```")
	if !ok {
		t.Fatalf("%s: the first ```%s block does not close", path, lang)
	}
	return code + "\n"
}

// copyTree copies the regular files under src to dst (a client's
// directory to a place outside the repository, as a newcomer's download
// would be), leaving out the directories named in skip.
func copyTree(t *testing.T, src, dst string, skip ...string) {
	t.Helper()
	err := os.CopyFS(dst, os.DirFS(src))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range skip {
		if err := os.RemoveAll(dst + "/" + s); err != nil {
			t.Fatal(err)
		}
	}
}

// TestGoReadme runs the Go client's README program as written against a
// live runtime, and builds a consumer module outside the repository the
// way the README says one is made before publication.
func TestGoReadme(t *testing.T) {
	code := readmeQuickstart(t, filepath.Join("..", "client", "README.md"), "go")
	t.Run("quickstart", func(t *testing.T) {
		rt := spawnertest.Start(t, nil)
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(code), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("go", "run", filepath.Join(dir, "main.go"))
		cmd.Env = append(os.Environ(), rt.Env...)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "complete <nil>") {
			t.Fatalf("the README's program: %v\n%s", err, out)
		}
		if n := rt.RC.SCard(context.Background(), rt.Keys.Workers()).Val(); n != 0 {
			t.Errorf("%d workers left: the deferred Close did not delete the worker", n)
		}
	})
	t.Run("consumer", func(t *testing.T) {
		root, err := filepath.Abs("..")
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		mod := "module example.com/consumer\n\ngo 1.26.0\n\nrequire github.com/agentvisor/agentvisor/client v0.0.0\n\nreplace (\n"
		for _, m := range []string{"client", "protocol", "redisconn"} {
			mod += "\tgithub.com/agentvisor/agentvisor/" + m + " => " + filepath.Join(root, m) + "\n"
		}
		mod += ")\n"
		for name, body := range map[string]string{"go.mod": mod, "main.go": code} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		for _, args := range [][]string{{"mod", "tidy"}, {"build", "./..."}} {
			cmd := exec.Command("go", args...)
			cmd.Dir, cmd.Env = dir, append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("go %s in a consumer module: %v\n%s", strings.Join(args, " "), err, out)
			}
		}
		got, _ := os.ReadFile(filepath.Join(dir, "go.mod"))
		if strings.Contains(string(got), "testkit") {
			t.Errorf("the consumer's go.mod names testkit:\n%s", got)
		}
	})
}
