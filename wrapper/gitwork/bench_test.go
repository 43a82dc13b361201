package gitwork

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/testkit"
)

// BenchmarkGitWork measures a git task's own steps (Prepare, then Finish
// of a one-file change: fetch, checkout, clean, add, commit, push and
// the output's log, diffstat and patch) against the same git commands
// run bare (fetch, checkout, add, commit, push), alternating, on a
// follow-up of one branch in an existing clone, against git http-backend
// on loopback. The difference is what the wrapper adds to a git task.
func BenchmarkGitWork(b *testing.B) {
	const rounds = 20
	srv := testkit.StartPlainGitServer(b)
	env := []string{"HOME=" + b.TempDir(), "PATH=" + os.Getenv("PATH"), "GIT_CONFIG_NOSYSTEM=1"}
	ctx := context.Background()
	p := Params{Workspace: b.TempDir(), Env: env}
	g := protocol.Git{Remote: srv.RepoURL(), Branch: "bench/wrapper"}
	bare := filepath.Join(b.TempDir(), "bare")
	testkit.Git(b, filepath.Dir(bare), nil, "clone", "-q", srv.RepoURL(), bare)
	testkit.Git(b, bare, nil, "checkout", "-q", "-b", "bench/bare")
	run := func(dir string, args ...string) {
		cmd := exec.Command("git", args...)
		cmd.Dir, cmd.Env = dir, append(env, "GIT_AUTHOR_NAME=b", "GIT_AUTHOR_EMAIL=b@b", "GIT_COMMITTER_NAME=b", "GIT_COMMITTER_EMAIL=b@b")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	var wrapped, plain []float64
	for b.Loop() {
		for i := range rounds {
			name := "f" + strconv.Itoa(i) + ".txt"
			start := time.Now()
			w, err := Prepare(ctx, p, g)
			if err != nil {
				b.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(w.Dir, name), []byte(name+"\n"), 0o644); err != nil {
				b.Fatal(err)
			}
			out, err := w.Finish(ctx, FinishArgs{Subject: "round " + name, RequestID: "r"})
			if err != nil || !out.Pushed {
				b.Fatalf("%+v %v", out, err)
			}
			wrapped = append(wrapped, float64(time.Since(start).Microseconds())/1000)

			start = time.Now()
			run(bare, "fetch", "-q", "origin")
			run(bare, "checkout", "-q", "-B", "bench/bare")
			if err := os.WriteFile(filepath.Join(bare, name), []byte(name+"\n"), 0o644); err != nil {
				b.Fatal(err)
			}
			run(bare, "add", "-A")
			run(bare, "commit", "-q", "-m", "round "+name)
			run(bare, "push", "-q", "origin", "HEAD:refs/heads/bench/bare")
			plain = append(plain, float64(time.Since(start).Microseconds())/1000)
		}
	}
	b.ReportMetric(median(wrapped), "gitwork-task-median-ms")
	b.ReportMetric(median(plain), "gitwork-bare-median-ms")
	b.ReportMetric(median(wrapped)-median(plain), "gitwork-added-median-ms")
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
