package gateway

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/agentvisor/agentvisor/testkit"
)

// relay is the wrapper's loopback front in the container, reduced to
// what the test needs: every TCP connection to it is relayed to sock.
func relay(t *testing.T, sock string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				up, err := net.Dial("unix", sock)
				if err != nil {
					return
				}
				defer up.Close()
				done := make(chan struct{})
				go func() {
					_, _ = io.Copy(up, c)
					_ = up.(*net.UnixConn).CloseWrite()
					close(done)
				}()
				_, _ = io.Copy(c, up)
				_ = c.(*net.TCPConn).CloseWrite()
				<-done
			}()
		}
	}()
	return l.Addr().String()
}

// The real git clones http://git.example.test/repo.git through the
// egress proxy (by a relay, as the wrapper's front does) from a git
// smart-HTTP server behind TLS that answers 401 without the credential:
// the gateway added it. The token is nowhere on the container's side: not
// in the clone's .git, git's environment or arguments; nor in the log.
func TestCredentialGitClone(t *testing.T) {
	const user, token = "git", "s3cret-clone-token"
	srv := testkit.StartGitServer(t, user, token)
	root := t.TempDir()
	head := srv.Head

	gwLog := &syncBuf{}
	dir := shortDir(t)
	_, c := startGatewayWith(t, Config{Dir: dir, Redis: "127.0.0.1:1",
		Log:         slog.New(slog.NewJSONHandler(gwLog, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Credentials: []Credential{{Host: "git.example.test", Username: user, Password: token, Projects: []string{"shop"}}},
		UpstreamTLS: &tls.Config{RootCAs: srv.Roots, ServerName: "example.com"},
		Resolver:    func(context.Context, string) ([]string, error) { return []string{fakeAddr}, nil },
		DialEgress: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr != fakeAddr+":443" {
				return nil, &net.OpError{Op: "dial", Net: network, Err: os.ErrNotExist}
			}
			var d net.Dialer
			return d.DialContext(ctx, network, srv.Listener.Addr().String())
		},
	})
	if _, err := c.OpenSpec(context.Background(), WorkerSpec{WorkerID: "w1", ProjectID: "shop", Allow: []string{"git.example.test"}, ModelToken: pushToken}); err != nil {
		t.Fatal(err)
	}
	front := relay(t, sockOf(dir, "w1", EgressSocket))

	home := filepath.Join(root, "home")
	if err := os.Mkdir(home, 0o755); err != nil {
		t.Fatal(err)
	}
	env := []string{"http_proxy=", "https_proxy=", "HTTP_PROXY=", "HTTPS_PROXY=", "no_proxy=", "NO_PROXY="}
	args := []string{"-c", "http.proxy=http://" + front, "clone", "-q", "http://git.example.test/repo.git", "clone"}
	testkit.Git(t, home, env, args...)
	clone := filepath.Join(home, "clone")
	if got := testkit.Git(t, clone, nil, "rev-parse", "HEAD"); got != head {
		t.Fatalf("clone's HEAD %s, want %s", got, head)
	}
	if b, err := os.ReadFile(filepath.Join(clone, "README")); err != nil || string(b) != "hello through the gateway\n" {
		t.Fatalf("README %q %v", b, err)
	}

	// A push of a few MiB: git posts them in one chunked request.
	big := make([]byte, 4<<20)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(clone, "big.bin"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	// A push goes to the branch the wrapper granted (gitpush.go) only.
	pe := &pushEnv{sock: sockOf(dir, "w1", EgressSocket)}
	if st := pe.grant(t, pushToken, &GitGrant{Remote: "https://git.example.test/repo.git", Branch: "main"}); st != 204 {
		t.Fatalf("grant: %d", st)
	}
	testkit.Git(t, clone, nil, "add", "big.bin")
	testkit.Git(t, clone, nil, "commit", "-q", "-m", "big")
	pushed := testkit.Git(t, clone, nil, "rev-parse", "HEAD")
	testkit.Git(t, clone, env, "-c", "http.proxy=http://"+front, "-c", "http.postBuffer=65536", "push", "-q", "origin", "main")
	if got := testkit.Git(t, srv.Repo, nil, "rev-parse", "main"); got != pushed {
		t.Fatalf("pushed %s, the server has %s", pushed, got)
	}

	// A worker of another project gets no credential: git is refused.
	if _, err := c.OpenSpec(context.Background(), WorkerSpec{WorkerID: "w2", ProjectID: "other", Allow: []string{"git.example.test"}}); err != nil {
		t.Fatal(err)
	}
	front2 := relay(t, sockOf(dir, "w2", EgressSocket))
	cmd := exec.Command("git", "-c", "http.proxy=http://"+front2, "clone", "-q", "http://git.example.test/repo.git", "clone2")
	cmd.Dir, cmd.Env = home, append([]string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0"}, env...)
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Fatalf("w2 cloned without a credential: %s", out)
	}

	// git posts the push chunked (past http.postBuffer); the gateway
	// spools it to read its commands and pack (gitpush.go), and the
	// upstream gets it with its length.
	if authed, chunked, unauthed := srv.Requests(); authed == 0 || chunked != 0 {
		t.Errorf("%d requests reached the backend with the credential (%d chunked), %d without", authed, chunked, unauthed)
	}

	// Nowhere on the container's side, nor in the log.
	noToken := func(what, s string) {
		t.Helper()
		if strings.Contains(s, token) || strings.Contains(s, "czNjcmV0") || strings.Contains(s, "Z2l0OnMzY3JldC") {
			t.Errorf("%s holds the token: %s", what, s)
		}
	}
	noToken("git's arguments", strings.Join(args, " "))
	noToken("git's environment", strings.Join(env, " "))
	err := filepath.WalkDir(home, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		noToken(p, string(b))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	noToken("the gateway's log", gwLog.String())
	info, err := c.Worker(context.Background(), "w1")
	if err != nil || len(info.CredentialHosts) != 1 || info.CredentialHosts[0] != "git.example.test" {
		t.Fatalf("credential_hosts %v %v", info.CredentialHosts, err)
	}
}
