package egress

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestGitInsteadOf(t *testing.T) {
	if got := GitInsteadOf(0, nil); got != nil {
		t.Fatalf("no hosts: %v", got)
	}
	got := GitInsteadOf(0, []string{"git.example.test", "code.example.test"})
	want := []string{
		"GIT_CONFIG_KEY_0=url.http://git.example.test/.insteadOf", "GIT_CONFIG_VALUE_0=https://git.example.test/",
		"GIT_CONFIG_KEY_1=url.http://code.example.test/.insteadOf", "GIT_CONFIG_VALUE_1=https://code.example.test/",
		"GIT_CONFIG_COUNT=2",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q\nwant %q", got, want)
	}
	if got := GitInsteadOf(3, []string{"git.example.test"}); !slices.Equal(got, []string{
		"GIT_CONFIG_KEY_3=url.http://git.example.test/.insteadOf", "GIT_CONFIG_VALUE_3=https://git.example.test/", "GIT_CONFIG_COUNT=4"}) {
		t.Fatalf("after 3: %q", got)
	}
}

// The real git rewrites an https:// URL of such a host to http:// (and
// leaves others alone), push URLs included.
func TestGitInsteadOfWithGit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is missing (make setup installs it): ", err)
	}
	dir := t.TempDir()
	run := func(env []string, args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append([]string{"HOME=" + dir, "PATH=" + os.Getenv("PATH"), "GIT_CONFIG_NOSYSTEM=1"}, env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	run(nil, "init", "-q", filepath.Join(dir, "r"))
	dir = filepath.Join(dir, "r")
	run(nil, "remote", "add", "origin", "https://git.example.test/org/repo.git")
	run(nil, "remote", "add", "other", "https://elsewhere.example.test/repo.git")
	env := GitInsteadOf(0, []string{"git.example.test"})
	if got := run(env, "remote", "get-url", "origin"); got != "http://git.example.test/org/repo.git" {
		t.Fatalf("origin: %s", got)
	}
	if got := run(env, "remote", "get-url", "--push", "origin"); got != "http://git.example.test/org/repo.git" {
		t.Fatalf("origin's push URL: %s", got)
	}
	if got := run(env, "remote", "get-url", "other"); got != "https://elsewhere.example.test/repo.git" {
		t.Fatalf("other: %s", got)
	}
}
