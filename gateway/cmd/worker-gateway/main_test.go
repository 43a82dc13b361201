package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/envconf"
	"github.com/agentvisor/agentvisor/gateway"
	"github.com/agentvisor/agentvisor/testkit"
)

// update rewrites the tables of docs/configuration.md from the code
// (make config-docs) instead of failing when they differ.
var update = flag.Bool("update", false, "rewrite the worker-gateway's table of docs/configuration.md from the code")

// The worker-gateway's section of docs/configuration.md is its table
// of variables, rendered from the code (envconf.Markdown): a variable
// added, removed, or with another default or Doc, fails until the
// section is regenerated.
func TestConfigTables(t *testing.T) {
	const path = "../../../docs/configuration.md"
	diff, err := envconf.SyncFile(path, "worker-gateway", configVars(&config{}), *update)
	switch {
	case err != nil:
		t.Fatal(err)
	case diff != "" && *update:
		t.Logf("rewrote the worker-gateway's table of %s:\n%s", path, diff)
	case diff != "":
		t.Errorf("the worker-gateway's table of %s is not the code's; regenerate it with `make config-docs` "+
			"(or `go test -run TestConfigTables ./cmd/worker-gateway -update` in gateway/). - the file's, + the code's:\n%s", path, diff)
	}
}

func TestConfigFromEnv(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	c, err := configFromEnv(env(map[string]string{"GATEWAY_REDIS": "127.0.0.1:6379"}))
	if err != nil || !reflect.DeepEqual(c, config{Dir: DefaultDir, Redis: "127.0.0.1:6379", MaxConns: gateway.DefaultMaxConns, WorkerUID: gateway.DefaultWorkerUID, LogLevel: "info"}) {
		t.Fatalf("%+v %v", c, err)
	}
	sentinel := "rediss+sentinel://10.0.0.1:26379,10.0.0.2/agentvisor/0?sentinel_password=s%40pw"
	if c, err := configFromEnv(env(map[string]string{"GATEWAY_REDIS": sentinel})); err != nil || c.Redis != sentinel {
		t.Fatalf("a sentinel GATEWAY_REDIS: %+v %v", c, err)
	}
	c, err = configFromEnv(env(map[string]string{"GATEWAY_REDIS": "127.0.0.1:6379", "GATEWAY_ALLOW": "github.com, *.npmjs.org:443 ,"}))
	if err != nil || !slices.Equal(c.Allow, []string{"github.com", "*.npmjs.org:443"}) {
		t.Fatalf("GATEWAY_ALLOW: %+v %v", c, err)
	}
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{nil, "config: GATEWAY_REDIS: required (the upstream Redis, host:port, or a redis+sentinel:// URL (sentinels, master name, the sentinels' credentials only): what every worker's redis.sock is relayed to; for a sentinel URL, the primary the sentinels name at each connection)"},
		{map[string]string{"GATEWAY_REDIS": "redis://127.0.0.1:6379/0"}, `config: GATEWAY_REDIS: gateway: Redis: a redis:// URL: want host:port, or a redis+sentinel:// URL (the wrapper speaks TLS and AUTH end to end)`},
		{map[string]string{"GATEWAY_REDIS": "u:secret@127.0.0.1:6379"}, `config: GATEWAY_REDIS: gateway: Redis: want host:port or a redis+sentinel:// URL, got an address with an @ (credentials?)`},
		{map[string]string{"GATEWAY_REDIS": "redis+sentinel://:secret@127.0.0.1:26379/m"}, `config: GATEWAY_REDIS: gateway: Redis: the sentinel URL carries the data user's credentials, which the gateway must not hold: give only the sentinels' (sentinel_username, sentinel_password)`},
		{map[string]string{"GATEWAY_REDIS": "redis+sentinel://127.0.0.1:26379"}, `config: GATEWAY_REDIS: gateway: Redis: protocol: bad redis URL: a sentinel URL needs the master's name as its path (/mymaster or /mymaster/0)`},
		{map[string]string{"GATEWAY_REDIS": "127.0.0.1:6379", "GATEWAY_MODEL": "api"}, `config: GATEWAY_MODEL: gateway: Model: want host:port or an http(s) URL, got "api"`},
		{map[string]string{"GATEWAY_REDIS": "127.0.0.1:6379", "GATEWAY_MAX_CONNS": "0"}, `config: GATEWAY_MAX_CONNS: want a positive whole number, got "0"`},
		{map[string]string{"GATEWAY_REDIS": "127.0.0.1:6379", "GATEWAY_ALLOW": "github.com,*"}, `config: GATEWAY_ALLOW: gateway: allow entry "*": allows every host: that is host networking, not an allowlist; list the hosts (or *.suffix)`},
		{map[string]string{"GATEWAY_REDIS": "127.0.0.1:6379", "LOG_LEVEL": "chatty"}, `config: LOG_LEVEL: want debug, info, warn or error, got "chatty"`},
	} {
		if _, err := configFromEnv(env(tc.env)); err == nil || err.Error() != tc.want {
			t.Errorf("%v: got %v, want %s", tc.env, err, tc.want)
		}
	}
}

// buildBinary builds worker-gateway once for the package's tests.
var buildBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "gwbin")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "worker-gateway")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		return "", &buildError{out}
	}
	return bin, nil
})

type buildError struct{ out []byte }

func (e *buildError) Error() string { return "go build: " + string(e.out) }

func TestMain(m *testing.M) {
	code := m.Run()
	if bin, err := buildBinary(); err == nil {
		os.RemoveAll(filepath.Dir(bin))
	}
	os.Exit(code)
}

// proc is a worker-gateway process of a test.
type proc struct {
	cmd    *exec.Cmd
	stderr *testkit.SyncBuffer
	exited chan struct{}
}

// startProc starts worker-gateway on dir and waits until its control
// socket answers.
func startProc(t testing.TB, dir string, env ...string) *proc {
	t.Helper()
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: exec.Command(bin), stderr: &testkit.SyncBuffer{}, exited: make(chan struct{})}
	p.cmd.Env = append([]string{"GATEWAY_DIR=" + dir, "PATH=" + os.Getenv("PATH")}, env...)
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() { p.cmd.Process.Kill(); <-p.exited })
	c := gateway.NewClient(dir)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := c.Workers(context.Background()); err == nil {
			return p
		}
		select {
		case <-p.exited:
			t.Fatalf("worker-gateway exited: %s", p.stderr)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("worker-gateway did not answer within 10 s: %s", p.stderr)
		}
	}
}

func shortDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "gw")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func ping(sock string) error {
	c, err := net.DialTimeout("unix", sock, 2*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.WriteString(c, "PING\r\n"); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return &net.AddrError{Err: "PING answered " + line, Addr: sock}
	}
	return nil
}

// worker-gateway killed with SIGKILL (no cleanup at all) and started
// again on the same directory serves the same workers on the same paths;
// SIGTERM then stops it with status 0, and its log is JSON lines.
func TestKilledGatewayResumes(t *testing.T) {
	r := testkit.StartRedis(t)
	dir := shortDir(t)
	env := []string{"GATEWAY_REDIS=" + r.Addr}
	p := startProc(t, dir, env...)
	c := gateway.NewClient(dir)
	ctx := context.Background()
	ids := []string{"6f1c2a9e-0b7d-4e8a-9c3f-2d5e7a1b4c60", "w2"}
	for _, id := range ids {
		if err := c.Open(ctx, id, nil); err != nil {
			t.Fatal(err)
		}
		if err := ping(filepath.Join(dir, id, gateway.RedisSocket)); err != nil {
			t.Fatal(err)
		}
	}
	open, err := net.Dial("unix", filepath.Join(dir, ids[0], gateway.RedisSocket))
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()

	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.exited
	if err := ping(filepath.Join(dir, ids[0], gateway.RedisSocket)); err == nil {
		t.Fatal("a killed gateway's socket answers")
	}
	if _, err := c.Workers(ctx); err == nil || !strings.Contains(err.Error(), "gateway: not running at "+filepath.Join(dir, "control.sock")) {
		t.Fatalf("client of a killed gateway: %v", err)
	}
	_ = open.SetReadDeadline(time.Now().Add(5 * time.Second))
	// EOF, or a reset when the gateway died before it accepted it.
	if _, err := open.Read(make([]byte, 1)); err == nil || os.IsTimeout(err) {
		t.Fatalf("a connection open through the killed gateway: %v, want it closed", err)
	}

	p2 := startProc(t, dir, env...)
	got, err := c.Workers(ctx)
	if err != nil || !slices.Equal(got, []string{ids[0], "w2"}) {
		t.Fatalf("after restart: %v %v", got, err)
	}
	for _, id := range ids {
		if err := ping(filepath.Join(dir, id, gateway.RedisSocket)); err != nil {
			t.Fatalf("%s after restart: %v", id, err)
		}
	}

	if err := p2.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p2.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("worker-gateway ignored SIGTERM")
	}
	if code := p2.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("exit %d: %s", code, p2.stderr)
	}
	for _, line := range strings.Split(strings.TrimSpace(p2.stderr.String()), "\n") {
		if !strings.HasPrefix(line, "{") {
			t.Fatalf("a log line that is no JSON: %q", line)
		}
	}
	if !strings.Contains(p2.stderr.String(), `"msg":"worker resumed"`) {
		t.Fatalf("log: %s", p2.stderr)
	}
}

// A bad configuration stops the binary at start with status 2 and the
// variable's name.
func TestBadConfigExits(t *testing.T) {
	var stderr bytes.Buffer
	code := run(context.Background(), func(k string) string { return map[string]string{"GATEWAY_DIR": shortDir(t)}[k] }, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), "config: GATEWAY_REDIS: required") {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
}

// The credentials file: one readable by others stops the binary at start
// (status 2); SIGHUP reads it again, and its secrets are never logged.
func TestCredentialsFileBinary(t *testing.T) {
	const secret = "s3cret-binary-token"
	path := filepath.Join(t.TempDir(), "credentials.json")
	write := func(host string, mode os.FileMode) {
		t.Helper()
		b := fmt.Sprintf(`[{"host": %q, "header": "Authorization", "value": "Bearer %s"}]`, host, secret)
		if err := os.WriteFile(path, []byte(b), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
	}
	write("git.example.test", 0o644)
	var stderr bytes.Buffer
	env := map[string]string{"GATEWAY_DIR": shortDir(t), "GATEWAY_REDIS": "127.0.0.1:1", "GATEWAY_CREDENTIALS_FILE": path}
	code := run(context.Background(), func(k string) string { return env[k] }, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), "mode 0644: want 0600") {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}

	write("git.example.test", 0o600)
	dir := shortDir(t)
	p := startProc(t, dir, "GATEWAY_REDIS=127.0.0.1:1", "GATEWAY_CREDENTIALS_FILE="+path)
	c := gateway.NewClient(dir)
	ctx := context.Background()
	if _, err := c.OpenSpec(ctx, gateway.WorkerSpec{WorkerID: "w1", ProjectID: "shop", Allow: []string{"git.example.test"}}); err != nil {
		t.Fatal(err)
	}
	hosts := func() []string {
		info, err := c.Worker(ctx, "w1")
		if err != nil {
			t.Fatal(err)
		}
		return info.CredentialHosts
	}
	if h := hosts(); !slices.Equal(h, []string{"git.example.test"}) {
		t.Fatalf("credential_hosts %v", h)
	}
	write("pkg.example.test", 0o600)
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !slices.Equal(hosts(), []string{"pkg.example.test"}) {
		if time.Now().After(deadline) {
			t.Fatalf("after SIGHUP: credential_hosts %v; %s", hosts(), p.stderr)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if strings.Contains(p.stderr.String(), secret) {
		t.Fatalf("the log holds the secret: %s", p.stderr)
	}
}

// GATEWAY_UPSTREAM_CA: the gateway trusts a private CA's host for the
// HTTPS it speaks to a credentialed upstream (a loopback TLS server whose
// certificate no system root signs); without it the same request fails.
func TestUpstreamCABinary(t *testing.T) {
	const token = "s3cret-upstream-ca-token"
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "no credential", http.StatusUnauthorized)
			return
		}
		_, _ = io.WriteString(w, "private host reached")
	}))
	defer up.Close()
	port := up.Listener.Addr().(*net.TCPAddr).Port
	tmp := t.TempDir()
	ca := filepath.Join(tmp, "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: up.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	creds := filepath.Join(tmp, "credentials.json")
	b := fmt.Sprintf(`[{"host": "127.0.0.1", "port": %d, "value": "Bearer %s"}]`, port, token)
	if err := os.WriteFile(creds, []byte(b), 0o600); err != nil {
		t.Fatal(err)
	}
	get := func(env ...string) (int, string) {
		t.Helper()
		dir := shortDir(t)
		p := startProc(t, dir, append([]string{"GATEWAY_REDIS=127.0.0.1:1", "GATEWAY_CREDENTIALS_FILE=" + creds}, env...)...)
		defer func() { _ = p.cmd.Process.Signal(syscall.SIGTERM); <-p.exited }()
		allow := []string{fmt.Sprintf("127.0.0.1:%d", port)}
		if err := gateway.NewClient(dir).Open(context.Background(), "w1", allow); err != nil {
			t.Fatal(err)
		}
		sock := filepath.Join(dir, "w1", gateway.EgressSocket)
		hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: "egress"}),
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", sock)
			}}}
		resp, err := hc.Get("http://127.0.0.1/repo.git/info/refs")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := get("GATEWAY_UPSTREAM_CA=" + ca); code != http.StatusOK || body != "private host reached" {
		t.Fatalf("with GATEWAY_UPSTREAM_CA: %d %q", code, body)
	}
	if code, body := get(); code != http.StatusBadGateway || !strings.Contains(body, "certificate") {
		t.Fatalf("without GATEWAY_UPSTREAM_CA: %d %q, want 502 naming the certificate", code, body)
	}

	// A file without a certificate stops the binary at start.
	if err := os.WriteFile(ca, []byte("not a certificate\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	env := map[string]string{"GATEWAY_DIR": shortDir(t), "GATEWAY_REDIS": "127.0.0.1:1", "GATEWAY_UPSTREAM_CA": ca}
	if code := run(context.Background(), func(k string) string { return env[k] }, &stderr); code != 2 ||
		!strings.Contains(stderr.String(), "config: GATEWAY_UPSTREAM_CA: "+ca+": no PEM certificate in it") {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
}
