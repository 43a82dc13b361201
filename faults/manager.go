package faults

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
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
