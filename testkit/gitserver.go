package testkit

import (
	"bytes"
	"crypto/x509"
	"io"
	"log"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// GitHTTPBackend is git's smart-HTTP CGI program (Debian's git).
const GitHTTPBackend = "/usr/lib/git-core/git-http-backend"

// GitServer is a git smart-HTTP server behind TLS on loopback that
// answers 401 to a request without its Basic credential: it stands for a
// private git host. It serves one repository, repo.git, holding one
// commit (Head) with a README.
type GitServer struct {
	*httptest.Server
	Repo  string         // the bare repository's directory
	Head  string         // the commit it holds
	Roots *x509.CertPool // trusts the server's certificate

	mu               sync.Mutex
	authed, unauthed int
	chunked          int
}

// StartGitServer starts a GitServer that wants user and password; it
// stops when the test ends. A missing git fails the test.
func StartGitServer(t testing.TB, user, password string) *GitServer {
	t.Helper()
	return startGitServer(t, user, password, true)
}

// StartPlainGitServer starts a GitServer on plain HTTP that wants no
// credential (RepoURL is its repository's URL): a remote for a worker
// without a gateway. It stops when the test ends.
func StartPlainGitServer(t testing.TB) *GitServer {
	t.Helper()
	return startGitServer(t, "", "", false)
}

// RepoURL is the URL of the server's repository.
func (g *GitServer) RepoURL() string { return g.URL + "/repo.git" }

func startGitServer(t testing.TB, user, password string, useTLS bool) *GitServer {
	t.Helper()
	if _, err := os.Stat(GitHTTPBackend); err != nil {
		t.Fatalf("testkit: %s is missing (Debian's git; make setup installs it): %v", GitHTTPBackend, err)
	}
	root := t.TempDir()
	projects := filepath.Join(root, "srv")
	g := &GitServer{Repo: filepath.Join(projects, "repo.git")}
	Git(t, root, nil, "init", "-q", "--bare", g.Repo)
	work := filepath.Join(root, "work")
	Git(t, root, nil, "init", "-q", "-b", "main", work)
	if err := os.WriteFile(filepath.Join(work, "README"), []byte("hello through the gateway\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	Git(t, work, nil, "add", "README")
	Git(t, work, nil, "commit", "-q", "-m", "first")
	g.Head = Git(t, work, nil, "rev-parse", "HEAD")
	Git(t, work, nil, "push", "-q", g.Repo, "main")
	Git(t, g.Repo, nil, "symbolic-ref", "HEAD", "refs/heads/main")
	Git(t, g.Repo, nil, "config", "http.receivepack", "true")

	backend := &cgi.Handler{Path: GitHTTPBackend, Env: []string{"GIT_PROJECT_ROOT=" + projects, "GIT_HTTP_EXPORT_ALL=1"}}
	g.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		g.mu.Lock()
		if user != "" && (!ok || u != user || p != password) {
			g.unauthed++
			g.mu.Unlock()
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		g.authed++
		if r.ContentLength < 0 {
			g.chunked++
		}
		g.mu.Unlock()
		if r.ContentLength < 0 {
			// CGI takes a body of known length only: the server reads a
			// chunked one whole (what is in front of it may stream).
			b, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			r.Body, r.ContentLength, r.TransferEncoding = io.NopCloser(bytes.NewReader(b)), int64(len(b)), nil
		}
		backend.ServeHTTP(w, r)
	}))
	g.Config.ErrorLog = log.New(io.Discard, "", 0)
	if !useTLS {
		g.Start()
		t.Cleanup(g.Close)
		return g
	}
	g.StartTLS()
	t.Cleanup(g.Close)
	g.Roots = x509.NewCertPool()
	g.Roots.AddCert(g.Certificate())
	return g
}

// Requests counts the requests that came with the credential (and how
// many of those had a chunked body) and without it.
func (g *GitServer) Requests() (authed, chunked, unauthed int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.authed, g.chunked, g.unauthed
}

// Git runs git in dir with env (besides a clean HOME and no system
// configuration) and returns its output; a failure fails the test.
func Git(t testing.TB, dir string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append([]string{"HOME=" + dir, "PATH=" + os.Getenv("PATH"), "GIT_CONFIG_NOSYSTEM=1",
		"GIT_TERMINAL_PROMPT=0", "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.test",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.test"}, env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}
