package faults

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

// Manager is one worker-manager process of a case. Its log (JSON lines on
// stderr) goes to a file the case shows when it fails.
type Manager struct {
	ID string // its MANAGER_ID
	*process

	mu     sync.Mutex
	frozen bool
}

// process is a program of the suite (a manager, a gateway) run as a
// process of its own, its stdout and stderr in its log file.
type process struct {
	Log string // path of its log file

	cmd     *exec.Cmd
	done    chan struct{} // closed when the process has exited
	started time.Time
}

// startManager starts bin/worker-manager with exactly env (plus PATH, HOME
// and TMPDIR of the suite): nothing of the developer's shell leaks in.
func startManager(dir, id string, env map[string]string) (*Manager, error) {
	p, err := startProcess(ManagerBin(), filepath.Join(dir, fmt.Sprintf("manager-%s-%d.log", id, time.Now().UnixNano())), env)
	if err != nil {
		return nil, fmt.Errorf("start worker-manager %s: %w", id, err)
	}
	return &Manager{ID: id, process: p}, nil
}

// startProcess starts bin with exactly env (plus PATH, HOME and TMPDIR of
// the suite), logging to log.
func startProcess(bin, log string, env map[string]string) (*process, error) {
	p := &process{Log: log, done: make(chan struct{})}
	f, err := os.Create(p.Log)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin)
	for _, k := range []string{"PATH", "HOME", "TMPDIR"} {
		if v, ok := os.LookupEnv(k); ok {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		cmd.Env = append(cmd.Env, k+"="+env[k])
	}
	cmd.Stdout, cmd.Stderr = f, f
	// A test binary killed by its timeout leaves no process behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	p.cmd, p.started = cmd, time.Now()
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// Pid returns the process id.
func (p *process) Pid() int { return p.cmd.Process.Pid }

// Running reports whether the process has not exited.
func (p *process) Running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Exited returns a channel closed when the process has exited.
func (p *process) Exited() <-chan struct{} { return p.done }

// Kill sends SIGKILL (a crash: no defer, no cleanup) and waits for the
// process to be gone.
func (p *process) Kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// terminate sends SIGTERM (a supervisor's stop) and waits up to bound for
// the process to exit; past the bound it gets SIGKILL, as a supervisor
// would. It returns whether it exited by itself, and how long it took.
func (p *process) terminate(bound time.Duration) (bool, time.Duration) {
	t0 := time.Now()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return true, time.Since(t0)
	case <-time.After(bound):
		p.Kill()
		return false, time.Since(t0)
	}
}

// LogTail returns the last n lines of the process's log.
func (p *process) LogTail(n int) string {
	b, _ := os.ReadFile(p.Log)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// LogContains reports whether the process's log holds s.
func (p *process) LogContains(s string) bool {
	b, _ := os.ReadFile(p.Log)
	return strings.Contains(string(b), s)
}

// Freeze stops the process (SIGSTOP): it holds its connections and does
// nothing, as a manager stuck in a long GC pause or on a frozen host.
func (m *Manager) Freeze() {
	m.mu.Lock()
	defer m.mu.Unlock()
	_ = m.cmd.Process.Signal(syscall.SIGSTOP)
	m.frozen = true
}

// Thaw resumes a frozen process (SIGCONT).
func (m *Manager) Thaw() {
	m.mu.Lock()
	defer m.mu.Unlock()
	_ = m.cmd.Process.Signal(syscall.SIGCONT)
	m.frozen = false
}

// Terminate sends SIGTERM (a supervisor's stop), thawing a frozen
// manager first, and waits up to bound for the process to exit; past the
// bound it gets SIGKILL, as a supervisor would. It returns whether it
// exited by itself, and how long it took.
func (m *Manager) Terminate(bound time.Duration) (bool, time.Duration) {
	m.mu.Lock()
	if m.frozen {
		_ = m.cmd.Process.Signal(syscall.SIGCONT)
		m.frozen = false
	}
	m.mu.Unlock()
	return m.terminate(bound)
}

// ManagerEnv is the environment of a manager of the case: short
// intervals, so that a case takes seconds.
func (c *Case) ManagerEnv(id string) map[string]string {
	env := map[string]string{
		"REDIS_URL":               c.URL(),
		"WORKER_KEY_PREFIX":       c.Prefix,
		"MANAGER_ID":              id,
		"MAX_CONCURRENT_WORKERS":  strconv.Itoa(c.Opt.MaxWorkers),
		"HEARTBEAT_INTERVAL":      c.Opt.Heartbeat.String(),
		"RECONCILE_INTERVAL":      "2s",
		"CREATION_GRACE":          CreationGrace.String(),
		"WORKER_STOP_TIMEOUT":     StopTimeout.String(),
		"WORKER_CREATION_TIMEOUT": "60s",
		// A create at the limit queues: the cases count slots and queues
		// (a case that tests eviction sets EVICT_IDLE_AFTER in its Env).
		"EVICT_IDLE_AFTER":       "off",
		"WORKER_PROJECT_VOLUMES": "false",
		"WORKER_BASE_IMAGE":      BaseImage,
		"WORKER_MEMORY_LIMIT":    "256m",
		"WORKER_DISK_DIR":        c.DiskDir,
		"LEASE_TTL":              c.Lease.String(),
		"WORKER_ENV":             `{"AGENT_BIN":"` + FakeAgent + `","SESSION_POLICY":"new"}`,
		"WORKER_NETWORK_MODE":    "sealed", // GATEWAY_DIR: the case's or the host's gateway (StartManager)
	}
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		env["DOCKER_HOST"] = h
	}
	for k, v := range c.Opt.Env {
		env[k] = v
	}
	return env
}

// StartManager starts a worker-manager with MANAGER_ID id and the case's
// environment, changed by extra; it waits until the manager reads the
// command stream. Its workers sealed (the case's default), it gets the
// case's gateway as GATEWAY_DIR, started first when none runs yet
// (relaying to the case's Redis; with Options.Sentinel, to the primary
// its sentinels name): every manager of the case is on one host, so they
// share it.
func (c *Case) StartManager(id string, extra map[string]string) *Manager {
	c.T.Helper()
	return c.launch(id, extra, func(dir string, env map[string]string) (*Manager, error) {
		if env["WORKER_NETWORK_MODE"] == "sealed" {
			g := c.Gateway()
			if g == nil {
				upstream, err := upstreamOf(c.URL())
				if err != nil {
					return nil, err
				}
				g = c.StartGateway(upstream)
			}
			env["GATEWAY_DIR"] = g.Dir
		}
		return startManager(dir, id, env)
	})
}

// launch starts a manager with the case's environment changed by extra,
// through start, and waits until it reads the command stream.
func (c *Case) launch(id string, extra map[string]string, start func(dir string, env map[string]string) (*Manager, error)) *Manager {
	c.T.Helper()
	env := c.ManagerEnv(id)
	for k, v := range extra {
		env[k] = v
	}
	launched := time.Now()
	m, err := start(c.T.TempDir(), env)
	if err != nil {
		c.T.Fatal(err)
	}
	c.mu.Lock()
	c.managers = append(c.managers, m)
	c.mu.Unlock()
	// Ready: it reads the command stream under its MANAGER_ID (the
	// consumer name the README documents), since it was launched (a
	// manager started again under its id finds its consumer there).
	if !c.waitFor(15*time.Second, func() bool { return !m.Running() || c.consumerSeen(id, launched) }) || !m.Running() {
		c.T.Fatalf("manager %s did not start reading commands (no consumer %q in group %s) within 15 s; its log:\n%s",
			id, id, protocol.ManagerGroup, m.LogTail(30))
	}
	return m
}

// consumerSeen reports whether id is a consumer of the managers group on
// the command stream that has read commands since since.
func (c *Case) consumerSeen(id string, since time.Time) bool {
	cs, err := c.RC.XInfoConsumers(context.Background(), c.Keys.Commands(), protocol.ManagerGroup).Result()
	if err != nil {
		return false
	}
	for _, x := range cs {
		if x.Name == id && x.Idle < time.Since(since) {
			return true
		}
	}
	return false
}

// PendingAt returns how many commands consumer id holds delivered and not
// acknowledged.
func (c *Case) PendingAt(id string) int64 {
	cs, err := c.RC.XInfoConsumers(context.Background(), c.Keys.Commands(), protocol.ManagerGroup).Result()
	if err != nil {
		return 0
	}
	for _, x := range cs {
		if x.Name == id {
			return x.Pending
		}
	}
	return 0
}
