package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The demo's private git host: git's smart HTTP (git http-backend as a
// CGI program) behind TLS, with a certificate of a CA the demo makes at
// start, and Basic auth with a token only the gateway holds. It listens
// on 127.0.0.2, a loopback address of the host: the workers' NO_PROXY
// names 127.0.0.1 (their own loopback: the model proxy, the progress
// endpoint), so a clone of 127.0.0.1 would stay in the container, while
// 127.0.0.2 goes through the egress proxy to the gateway, which reaches
// it on the host.
const (
	gitHostIP    = "127.0.0.2"
	gitUser      = "demo"
	gitRepo      = "shop.git"
	gitSubject   = "Add the shop's catalogue"
	gitBackendCG = "git-http-backend"
	// gitCloneURL is what the agent clones. The wrapper has git read it
	// as http:// (the host is one of its CREDENTIAL_HOSTS), through the
	// egress proxy; the gateway adds the credential and speaks HTTPS to
	// the credential's port, the server's.
	gitCloneURL = "https://" + gitHostIP + "/" + gitRepo
)

// gitServer is the running git host.
type gitServer struct {
	port    int
	token   string // the Basic password: in the gateway's credentials file alone
	caFile  string // the CA's certificate (PEM), GATEWAY_UPSTREAM_CA
	repo    string // the bare repository's directory
	srv     *http.Server
	backend *cgi.Handler

	mu               sync.Mutex
	authed, unauthed int
}

// startGitServer makes a CA and the server's certificate, a bare
// repository with one commit, and serves it on 127.0.0.2; its files go
// under dir.
func startGitServer(dir string) (*gitServer, error) {
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	execPath, err := gitExecPath()
	if err != nil {
		return nil, err
	}
	projects := filepath.Join(dir, "srv")
	if err := makeRepo(dir, filepath.Join(projects, gitRepo)); err != nil {
		return nil, err
	}
	cert, caPEM, err := makeCerts()
	if err != nil {
		return nil, err
	}
	tok := make([]byte, 16)
	_, _ = rand.Read(tok)
	g := &gitServer{token: "demo-git-token-" + hex.EncodeToString(tok), caFile: filepath.Join(dir, "ca.pem"), repo: filepath.Join(projects, gitRepo),
		backend: &cgi.Handler{Path: filepath.Join(execPath, gitBackendCG), Env: []string{"GIT_PROJECT_ROOT=" + projects, "GIT_HTTP_EXPORT_ALL=1"}}}
	if err := os.WriteFile(g.caFile, caPEM, 0o644); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", gitHostIP+":0")
	if err != nil {
		return nil, fmt.Errorf("git server on %s (a loopback address of the host): %w", gitHostIP, err)
	}
	g.port = ln.Addr().(*net.TCPAddr).Port
	g.srv = &http.Server{Handler: g, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}
	go func() { _ = g.srv.ServeTLS(ln, "", "") }()
	return g, nil
}

// gitExecPath is where git's own programs (git-http-backend) are.
func gitExecPath() (string, error) {
	out, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		return "", fmt.Errorf("git --exec-path (the demo's git server needs git): %w", err)
	}
	p := strings.TrimSpace(string(out))
	if _, err := os.Stat(filepath.Join(p, gitBackendCG)); err != nil {
		return "", fmt.Errorf("the demo's git server: %w", err)
	}
	return p, nil
}

// makeRepo makes the bare repository bare, holding one commit (a README
// and gitSubject) on main.
func makeRepo(dir, bare string) error {
	work := filepath.Join(dir, "work")
	if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	env := append(os.Environ(), "HOME="+dir, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_TERMINAL_PROMPT=0",
		"GIT_AUTHOR_NAME=shop", "GIT_AUTHOR_EMAIL=shop@demo.test", "GIT_COMMITTER_NAME=shop", "GIT_COMMITTER_EMAIL=shop@demo.test")
	run := func(dir string, args ...string) error {
		cmd := exec.Command("git", args...)
		cmd.Dir, cmd.Env = dir, env
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	if err := os.WriteFile(filepath.Join(work, "README"), []byte("The shop's catalogue, cloned through the gateway.\n"), 0o644); err != nil {
		return err
	}
	for _, step := range []struct {
		dir  string
		args []string
	}{
		{dir, []string{"init", "-q", "--bare", "-b", "main", bare}},
		{work, []string{"init", "-q", "-b", "main"}},
		{work, []string{"add", "README"}},
		{work, []string{"commit", "-q", "-m", gitSubject}},
		{work, []string{"push", "-q", bare, "main"}},
		{bare, []string{"config", "http.receivepack", "true"}}, // the tasks' branches are pushed to it
	} {
		if err := run(step.dir, step.args...); err != nil {
			return err
		}
	}
	return nil
}

// makeCerts makes a CA and a certificate for 127.0.0.2 it signs; it
// returns that certificate with its key, and the CA's certificate (PEM).
func makeCerts() (tls.Certificate, []byte, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	now := time.Now()
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "agentvisor demo CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	ca, _ = x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: gitHostIP},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IPAddresses: []net.IP{net.ParseIP(gitHostIP)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, caPEM, nil
}

// ServeHTTP answers 401 to a request without the Basic credential and
// counts both kinds.
func (g *gitServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u, p, ok := r.BasicAuth()
	authed := ok && u == gitUser && p == g.token
	g.mu.Lock()
	if authed {
		g.authed++
	} else {
		g.unauthed++
	}
	g.mu.Unlock()
	if !authed {
		w.Header().Set("WWW-Authenticate", `Basic realm="demo git"`)
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	if r.ContentLength < 0 {
		// CGI takes a body of known length only.
		b, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body, r.ContentLength, r.TransferEncoding = io.NopCloser(bytes.NewReader(b)), int64(len(b)), nil
	}
	g.backend.ServeHTTP(w, r)
}

// ref is the commit the repository holds at ref, "" for none.
func (g *gitServer) ref(ref string) string {
	out, err := exec.Command("git", "--git-dir", g.repo, "rev-parse", "-q", "--verify", ref).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// requests counts the requests that came with the credential and without.
func (g *gitServer) requests() (authed, unauthed int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.authed, g.unauthed
}

// allow is the Claude worker's egress allowlist entry for the server.
func (g *gitServer) allow() string { return gitHostIP + ":" + strconv.Itoa(g.port) }

// writeCredentials writes the gateway's credentials file (mode 0600):
// the token for the server, for the workers of those projects alone.
func (g *gitServer) writeCredentials(path string, projects ...string) error {
	b, err := json.Marshal([]map[string]any{{"host": gitHostIP, "port": g.port, "username": gitUser, "password": g.token,
		"projects": projects}})
	if err != nil {
		return err
	}
	// An earlier run's file would keep its mode: a new file, 0600 from
	// the start.
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

// secrets are the forms of the token a leak would show: the token, and
// the Basic header's base64 of user:token.
func (g *gitServer) secrets() []string {
	return []string{g.token, basicValue(gitUser, g.token)}
}

func basicValue(user, password string) string {
	r, _ := http.NewRequest(http.MethodGet, "http://x/", nil)
	r.SetBasicAuth(user, password)
	return strings.TrimPrefix(r.Header.Get("Authorization"), "Basic ")
}

func (g *gitServer) close() error {
	if g == nil || g.srv == nil {
		return nil
	}
	err := g.srv.Close()
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
