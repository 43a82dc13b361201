// Package testkit holds the test harness every module of the workspace
// shares: a throwaway redis-server on a free loopback port (redis.go adds a
// client of it), a check that the Docker engine answers and the lock that
// shares it between test binaries (engine.go), the worker images built from
// this checkout (images.go), removal of a test's containers and volumes by
// label (docker.go), and the wait helpers (wait.go).
//
// It is a module of its own, apart from protocol, so that the protocol
// module keeps depending on the standard library only while the harness
// uses go-redis.
//
// A missing service fails the test, loudly, with what to run: tests never
// skip because Redis or Docker is absent (`make setup` installs both), so a
// green run always means the integration tests ran.
package testkit

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Redis is a redis-server that a test started and owns: its own port on
// 127.0.0.1, its own directory, stopped and removed when the test ends.
// Tests may Stop and Start it again (same port, same data directory) to
// simulate an outage.
type Redis struct {
	Addr     string // 127.0.0.1:port
	Port     int
	Dir      string
	Password string
	// Persist: every write is in the append-only file, fsynced before the
	// reply (appendonly yes, appendfsync always), so that a server killed
	// with SIGKILL and started again on the same port keeps its data.
	Persist bool

	t   testing.TB
	mu  sync.Mutex
	cmd *exec.Cmd
	// conf, when set, is a configuration file given first (a sentinel's,
	// which it rewrites); args are more arguments (a replica's).
	conf string
	args []string
}

// RedisOptions adjusts StartRedis.
type RedisOptions struct {
	Password string // requirepass; empty means none
	// Persist turns the append-only file on with appendfsync always (see
	// Redis.Persist): what a crash-and-restart test needs.
	Persist bool
}

// URL returns a redis:// URL for the server, with the password if any.
func (r *Redis) URL() string {
	if r.Password != "" {
		return fmt.Sprintf("redis://:%s@%s/0", r.Password, r.Addr)
	}
	return "redis://" + r.Addr + "/0"
}

// StartRedis starts a redis-server for the test and registers its removal.
func StartRedis(t testing.TB) *Redis { return StartRedisWith(t, RedisOptions{}) }

// StartRedisWith is StartRedis with options.
func StartRedisWith(t testing.TB, opts RedisOptions) *Redis {
	t.Helper()
	return startOnFreePort(t, &Redis{Dir: t.TempDir(), Password: opts.Password, Persist: opts.Persist, t: t})
}

// startOnFreePort starts r on a free loopback port (another, up to five
// times, when one was taken meanwhile) and registers its removal.
func startOnFreePort(t testing.TB, r *Redis) *Redis {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("testkit: redis-server is not installed (run `make setup`): %v", err)
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := FreePort()
		if err != nil {
			t.Fatalf("testkit: find a free port: %v", err)
		}
		r.Port, r.Addr = port, "127.0.0.1:"+strconv.Itoa(port)
		if lastErr = r.Start(); lastErr == nil {
			t.Cleanup(func() { _ = r.Stop() })
			return r
		}
	}
	t.Fatalf("testkit: start redis-server: %v", lastErr)
	return nil
}

// Start starts the server (again) on its port and waits until it answers
// PING. It is an error to start a running server.
func (r *Redis) Start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd != nil {
		return errors.New("testkit: redis-server already runs")
	}
	aof := "no"
	if r.Persist {
		aof = "yes"
	}
	args := []string{
		"--port", strconv.Itoa(r.Port), "--bind", "127.0.0.1",
		"--dir", r.Dir, "--save", "", "--appendonly", aof,
		"--daemonize", "no", "--logfile", filepath.Join(r.Dir, "redis.log"),
	}
	if r.Persist {
		args = append(args, "--appendfsync", "always")
	}
	if r.Password != "" {
		args = append(args, "--requirepass", r.Password)
	}
	args = append(args, r.args...)
	if r.conf != "" {
		args = append([]string{r.conf}, args...)
	}
	cmd := exec.Command("redis-server", args...)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("testkit: exec redis-server: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := r.do("PING"); err == nil {
			break
		}
		select {
		case err := <-exited:
			log, _ := os.ReadFile(filepath.Join(r.Dir, "redis.log"))
			return fmt.Errorf("testkit: redis-server on port %d exited (%v): %s", r.Port, err, tail(log, 800))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("testkit: redis-server on port %d did not answer PING within 10 s", r.Port)
		}
	}
	r.cmd = cmd
	r.cmd.WaitDelay = time.Second
	go func() { <-exited; r.mu.Lock(); r.exited(cmd); r.mu.Unlock() }()
	return nil
}

func (r *Redis) exited(cmd *exec.Cmd) {
	if r.cmd == cmd {
		r.cmd = nil
	}
}

// Stop kills the server and waits until its port is closed. Stopping a
// stopped server does nothing.
func (r *Redis) Stop() error {
	r.mu.Lock()
	cmd := r.cmd
	r.cmd = nil
	r.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Kill()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", r.Addr, 100*time.Millisecond)
		if err != nil {
			return nil
		}
		c.Close()
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("testkit: redis-server on %s still accepts connections after kill", r.Addr)
}

// Kill is Stop, named for what it does: the server gets SIGKILL, as in a
// crash, with no chance to write anything more. With Persist, Start brings
// back every write it acknowledged.
func (r *Redis) Kill() error { return r.Stop() }

// Pause stops the server's process (SIGSTOP) without ending it: its
// connections stay open and unanswered, as across a network partition,
// until Resume (SIGCONT). Stop and Kill end a paused server too.
func (r *Redis) Pause() error { return r.signal(syscall.SIGSTOP) }

// Resume lets a paused server run again.
func (r *Redis) Resume() error { return r.signal(syscall.SIGCONT) }

func (r *Redis) signal(sig syscall.Signal) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return errors.New("testkit: redis-server does not run")
	}
	return r.cmd.Process.Signal(sig)
}

// Running reports whether the server process runs.
func (r *Redis) Running() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cmd != nil
}

// Do sends one inline command and returns the first line of the reply. It
// serves the harness's own checks; tests use a real client.
func (r *Redis) Do(args ...string) (string, error) { return r.do(args...) }

func (r *Redis) do(args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", r.Addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	rd := bufio.NewReader(c)
	if r.Password != "" {
		if _, err := fmt.Fprintf(c, "AUTH %s\r\n", r.Password); err != nil {
			return "", err
		}
		if line, err := rd.ReadString('\n'); err != nil || !strings.HasPrefix(line, "+OK") {
			return "", fmt.Errorf("testkit: AUTH: %q %v", line, err)
		}
	}
	if _, err := fmt.Fprintf(c, "%s\r\n", strings.Join(args, " ")); err != nil {
		return "", err
	}
	line, err := rd.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if strings.HasPrefix(line, "-") {
		return "", errors.New("testkit: redis: " + line[1:])
	}
	return line, nil
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// DockerSocket returns the path of the engine's unix socket, from
// DOCKER_HOST when it names one.
func DockerSocket() string {
	if h := os.Getenv("DOCKER_HOST"); strings.HasPrefix(h, "unix://") {
		return strings.TrimPrefix(h, "unix://")
	}
	return "/var/run/docker.sock"
}

// PingDocker asks the engine's /_ping endpoint and returns an error unless
// it answers OK.
func PingDocker(ctx context.Context) error {
	sock := DockerSocket()
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://docker/_ping", nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("testkit: the Docker engine at %s does not answer: %w", sock, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("testkit: the Docker engine at %s answered /_ping with %s", sock, resp.Status)
	}
	return nil
}

// RequireDocker fails the test unless the Docker engine answers.
func RequireDocker(t testing.TB) {
	t.Helper()
	shareEngine(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := PingDocker(ctx); err != nil {
		t.Fatalf("%v (run `make setup` to install and start it)", err)
	}
}

// InCI reports whether the tests run in CI (CI=true).
func InCI() bool { v := os.Getenv("CI"); return v == "true" || v == "1" }

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
