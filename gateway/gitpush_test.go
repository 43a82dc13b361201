package gateway

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/testkit"
)

// pushEnv is a gateway with a credential for git.example.test, whose
// upstream is a real git http-backend behind TLS, a worker w1 open with
// a token, the wrapper's front relaying to its egress.sock, and a clone
// made through it.
type pushEnv struct {
	srv   *testkit.GitServer
	g     *Gateway
	cfg   Config
	c     *Client
	sock  string // w1's egress.sock
	front string
	clone string
	env   []string
}

const pushToken = "worker-token-of-w1"

func newPushEnv(t *testing.T) *pushEnv {
	t.Helper()
	srv := testkit.StartGitServer(t, "git", "push-secret")
	dir := shortDir(t)
	cfg := Config{Dir: dir, Redis: "127.0.0.1:1",
		Credentials: []Credential{{Host: "git.example.test", Username: "git", Password: "push-secret"}},
		UpstreamTLS: &tls.Config{RootCAs: srv.Roots, ServerName: "example.com"},
		Resolver:    func(context.Context, string) ([]string, error) { return []string{fakeAddr}, nil },
		DialEgress: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, srv.Listener.Addr().String())
		},
	}
	g, c := startGatewayWith(t, cfg)
	if _, err := c.OpenSpec(context.Background(), WorkerSpec{WorkerID: "w1", Allow: []string{"git.example.test"}, ModelToken: pushToken}); err != nil {
		t.Fatal(err)
	}
	e := &pushEnv{srv: srv, g: g, cfg: cfg, c: c, sock: sockOf(dir, "w1", EgressSocket)}
	e.front = relay(t, e.sock)
	e.env = []string{"http_proxy=", "https_proxy=", "HTTP_PROXY=", "HTTPS_PROXY=", "no_proxy=", "NO_PROXY="}
	home := t.TempDir()
	testkit.Git(t, home, e.env, "-c", "http.proxy=http://"+e.front, "clone", "-q", "http://git.example.test/repo.git", "clone")
	e.clone = filepath.Join(home, "clone")
	return e
}

// grant puts (or, for nil, deletes) w1's push grant with token; it
// returns the status.
func (e *pushEnv) grant(t *testing.T, token string, g *GitGrant) int {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", e.sock)
	}}}
	method, body := http.MethodDelete, []byte(nil)
	if g != nil {
		method = http.MethodPut
		body, _ = json.Marshal(g)
	}
	req, _ := http.NewRequest(method, "http://gateway"+GitGrantPath, bytes.NewReader(body))
	req.Header.Set(ModelTokenHeader, token)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// push runs git push in the clone through the front; it returns git's
// output and whether it succeeded.
func (e *pushEnv) push(t *testing.T, args ...string) (string, bool) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "http.proxy=http://" + e.front, "push"}, args...)...)
	cmd.Dir = e.clone
	cmd.Env = append([]string{"HOME=" + e.clone, "PATH=" + os.Getenv("PATH"), "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0"}, e.env...)
	out, err := cmd.CombinedOutput()
	return string(out), err == nil
}

// commit adds a commit to the clone's HEAD.
func (e *pushEnv) commit(t *testing.T, name string) string {
	t.Helper()
	if err := os.WriteFile(filepath.Join(e.clone, name), []byte(name+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	testkit.Git(t, e.clone, nil, "add", name)
	testkit.Git(t, e.clone, nil, "commit", "-q", "-m", "add "+name)
	return testkit.Git(t, e.clone, nil, "rev-parse", "HEAD")
}

// remoteRef is what the server's repository holds at ref ("" for none).
func (e *pushEnv) remoteRef(t *testing.T, ref string) string {
	t.Helper()
	out, _ := exec.Command("git", "--git-dir", e.srv.Repo, "rev-parse", "-q", "--verify", ref).Output()
	return strings.TrimSpace(string(out))
}

func (e *pushEnv) stats(t *testing.T) WorkerStats {
	t.Helper()
	st, err := e.c.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st["w1"]
}

// The grant is the wrapper's: without the worker's token it is refused,
// and with no grant no push passes, to any branch.
func TestGitPushNeedsTheGrant(t *testing.T) {
	e := newPushEnv(t)
	testkit.Git(t, e.clone, nil, "checkout", "-q", "-b", "agentvisor/r1")
	e.commit(t, "a")
	if out, ok := e.push(t, "origin", "agentvisor/r1"); ok {
		t.Fatalf("a push with no grant passed: %s", out)
	}
	for _, token := range []string{"", "guessed", pushToken + "x"} {
		if st := e.grant(t, token, &GitGrant{Remote: "https://git.example.test/repo.git", Branch: "main"}); st != http.StatusForbidden {
			t.Errorf("grant with token %q: %d, want 403", token, st)
		}
	}
	if got := e.remoteRef(t, "refs/heads/agentvisor/r1"); got != "" {
		t.Fatalf("the branch reached the server: %s", got)
	}
	if st := e.stats(t); st.GitPushRefused != 1 || st.GitPushes != 0 {
		t.Errorf("stats %+v", st)
	}
	for _, bad := range []GitGrant{{Remote: "https://git.example.test/repo.git"}, {Remote: "ftp://h/r", Branch: "b"},
		{Remote: "https://git.example.test/repo.git", Branch: "refs/tags/v1"}} {
		if st := e.grant(t, pushToken, &bad); st != http.StatusBadRequest {
			t.Errorf("grant %+v: %d, want 400", bad, st)
		}
	}
}

// With the grant, the task's branch is pushed (made, then fast-forwarded),
// and nothing else: another branch, a tag, a delete, a force push, or
// another repository are refused with 403 and a reason, and the server
// is left as it was. A task that allows a force push may make one.
func TestGitPushOnlyToTheTaskBranch(t *testing.T) {
	e := newPushEnv(t)
	const branch = "agentvisor/r1"
	if st := e.grant(t, pushToken, &GitGrant{Remote: "https://git.example.test/repo.git", Branch: branch}); st != http.StatusNoContent {
		t.Fatalf("grant: %d", st)
	}
	testkit.Git(t, e.clone, nil, "checkout", "-q", "-b", branch)
	first := e.commit(t, "a")
	if out, ok := e.push(t, "origin", branch); !ok {
		t.Fatalf("the task's branch was refused: %s", out)
	}
	second := e.commit(t, "b")
	if out, ok := e.push(t, "origin", branch); !ok {
		t.Fatalf("a fast-forward of the task's branch was refused: %s", out)
	}
	if got := e.remoteRef(t, "refs/heads/"+branch); got != second {
		t.Fatalf("server's %s is %s, want %s (first %s)", branch, got, second, first)
	}
	mainBefore := e.remoteRef(t, "refs/heads/main")

	testkit.Git(t, e.clone, nil, "tag", "v1")
	amended := func() string {
		testkit.Git(t, e.clone, nil, "commit", "-q", "--amend", "-m", "rewritten")
		return testkit.Git(t, e.clone, nil, "rev-parse", "HEAD")
	}
	refused := []struct {
		name string
		args []string
		prep func() string
		ref  string
	}{
		{"another branch", []string{"origin", branch + ":other"}, nil, "refs/heads/other"},
		{"main", []string{"origin", branch + ":main"}, nil, "refs/heads/main"},
		{"a tag", []string{"origin", "v1"}, nil, "refs/tags/v1"},
		{"a delete", []string{"origin", ":" + branch}, nil, "refs/heads/" + branch},
		{"the branch and a tag at once", []string{"--atomic", "origin", branch, "v1"}, nil, "refs/tags/v1"},
		{"a force push", []string{"--force", "origin", branch}, amended, "refs/heads/" + branch},
	}
	refusedBefore := e.stats(t).GitPushRefused
	for i, r := range refused {
		t.Run(r.name, func(t *testing.T) {
			if r.prep != nil {
				r.prep()
			}
			out, ok := e.push(t, r.args...)
			if ok {
				t.Fatalf("pushed: %s", out)
			}
			if !strings.Contains(out, "403") {
				t.Errorf("git says %s, want the gateway's 403", out)
			}
			if st := e.stats(t); st.GitPushRefused != refusedBefore+int64(i)+1 {
				t.Errorf("git_push_refused %d, want %d", st.GitPushRefused, refusedBefore+int64(i)+1)
			}
		})
	}
	if got := e.remoteRef(t, "refs/heads/"+branch); got != second {
		t.Errorf("the task's branch moved to %s", got)
	}
	if got := e.remoteRef(t, "refs/heads/main"); got != mainBefore {
		t.Errorf("main moved to %s", got)
	}
	for _, ref := range []string{"refs/heads/other", "refs/tags/v1"} {
		if got := e.remoteRef(t, ref); got != "" {
			t.Errorf("%s reached the server: %s", ref, got)
		}
	}

	// Another repository of the same host: refused.
	if st := e.grant(t, pushToken, &GitGrant{Remote: "https://git.example.test/other.git", Branch: branch}); st != http.StatusNoContent {
		t.Fatalf("grant: %d", st)
	}
	if out, ok := e.push(t, "origin", branch); ok {
		t.Fatalf("pushed to a repository the grant does not name: %s", out)
	}

	// A task that allows it: the amended commit goes.
	if st := e.grant(t, pushToken, &GitGrant{Remote: "https://git.example.test/repo", Branch: branch, AllowForcePush: true}); st != http.StatusNoContent {
		t.Fatalf("grant: %d", st)
	}
	head := testkit.Git(t, e.clone, nil, "rev-parse", "HEAD")
	if out, ok := e.push(t, "--force", "origin", branch); !ok {
		t.Fatalf("an allowed force push was refused: %s", out)
	}
	if got := e.remoteRef(t, "refs/heads/"+branch); got != head {
		t.Errorf("server's branch %s, want the amended %s", got, head)
	}
	// The grant ended: nothing passes.
	if st := e.grant(t, pushToken, nil); st != http.StatusNoContent {
		t.Fatalf("delete grant: %d", st)
	}
	e.commit(t, "c")
	if out, ok := e.push(t, "origin", branch); ok {
		t.Fatalf("pushed after the grant ended: %s", out)
	}
}

// The refusal's answer is what the wrapper's front reads: 403, the
// refused host:port and the reason.
func TestGitPushRefusalNamesTheReason(t *testing.T) {
	e := newPushEnv(t)
	if st := e.grant(t, pushToken, &GitGrant{Remote: "https://git.example.test/repo.git", Branch: "mine"}); st != http.StatusNoContent {
		t.Fatalf("grant: %d", st)
	}
	old := e.remoteRef(t, "refs/heads/main")
	body := pktLine(old+" "+old[:39]+"1 refs/heads/main\x00report-status side-band-64k") + "0000"
	hc := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(mustURL(t, "http://"+e.front))}}
	resp, err := hc.Post("http://git.example.test/repo.git/git-receive-pack", "application/x-git-receive-pack-request", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get(RefusedHeader) != "git.example.test:443" ||
		!strings.Contains(resp.Header.Get(RefusedReasonHeader), "push to refs/heads/main: not the task's branch refs/heads/mine") {
		t.Fatalf("answer %d %v", resp.StatusCode, resp.Header)
	}
}

func pktLine(s string) string {
	return hex4(len(s)+4) + s
}

func hex4(n int) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[n>>12&15], digits[n>>8&15], digits[n>>4&15], digits[n&15]})
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// What a container posts as a push is outside input: whatever it is,
// reading it ends in a verdict (an error or nil), never a panic or a
// hang.
func FuzzCheckPush(f *testing.F) {
	old := strings.Repeat("1", 40)
	f.Add([]byte("0000"))
	f.Add([]byte(pktLine(zeroID+" "+old+" refs/heads/b\x00report-status") + "0000PACK\x00\x00\x00\x02\x00\x00\x00\x00" + strings.Repeat("\x00", 20)))
	f.Add([]byte(pktLine(old+" "+old+" refs/heads/b\x00push-options") + "0000" + pktLine("o") + "0000PACK\x00\x00\x00\x02\x00\x00\x00\x01\x96\x0ax"))
	f.Add([]byte(pktLine(old+" "+old+" refs/heads/b") + "0000PACK\x00\x00\x00\x02\x00\x00\x00\x02\x60\x05\x7f"))
	g := &pushGrant{host: "h", repo: "/r", ref: "refs/heads/b"}
	f.Fuzz(func(t *testing.T, body []byte) {
		_ = checkPush(bufio.NewReader(bytes.NewReader(body)), g)
	})
}

// restart stops the gateway and starts another on its directory, as
// after a crash or an upgrade: it serves w1 again from what it kept.
func (e *pushEnv) restart(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.g.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	e.g, e.c = startGatewayWith(t, e.cfg)
}

// A grant outlives a restart of the gateway between the grant and the
// push: the task's branch is pushed through the new gateway, another
// branch is still refused, and a grant ended before a restart stays
// ended after it. The file that keeps it is root's alone.
func TestGitPushGrantSurvivesAGatewayRestart(t *testing.T) {
	e := newPushEnv(t)
	const branch = "agentvisor/r1"
	if st := e.grant(t, pushToken, &GitGrant{Remote: "https://git.example.test/repo.git", Branch: branch}); st != http.StatusNoContent {
		t.Fatalf("grant: %d", st)
	}
	if fi, err := os.Stat(filepath.Join(e.cfg.Dir, "w1", GitGrantFile)); err != nil || fi.Mode().Perm() != WorkerFileMode {
		t.Fatalf("the kept grant: %v %v", fi, err)
	}
	e.restart(t)
	testkit.Git(t, e.clone, nil, "checkout", "-q", "-b", branch)
	head := e.commit(t, "a")
	if out, ok := e.push(t, "origin", branch); !ok {
		t.Fatalf("the task's branch after a restart was refused: %s", out)
	}
	if got := e.remoteRef(t, "refs/heads/"+branch); got != head {
		t.Fatalf("the server has %q at %s, want %s", got, branch, head)
	}
	if out, ok := e.push(t, "origin", "HEAD:refs/heads/other"); ok {
		t.Fatalf("another branch after a restart passed: %s", out)
	}
	if st := e.grant(t, pushToken, nil); st != http.StatusNoContent {
		t.Fatalf("end the grant: %d", st)
	}
	e.restart(t)
	e.commit(t, "b")
	if out, ok := e.push(t, "origin", branch); ok {
		t.Fatalf("a push after the grant ended and a restart passed: %s", out)
	}
	if got := e.remoteRef(t, "refs/heads/"+branch); got != head {
		t.Fatalf("the server moved to %q", got)
	}
}
