package faults

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
)

// A Fleet is several simulated hosts on this machine, each a Docker
// engine of its own (Engine) with its worker-manager, all on one Redis:
// what a fleet runs on several machines. The fleet's directory holds the
// engines' roots and an owner file, so that a fleet whose process died
// (a test binary killed by its timeout) is swept by the next one.
type Fleet struct {
	ID    string // unique on the machine: names the directory and the cgroups
	Dir   string
	Hosts []*Host
}

// Host is one simulated machine: its engine, its current manager and,
// its workers sealed, its worker-gateway serving GatewayDir.
type Host struct {
	ID         string // HOST_ID
	Engine     *Engine
	GatewayDir string // the host's GATEWAY_DIR: a short temporary directory (Fleet.Dir links to it)

	mu      sync.Mutex
	manager *Manager
	gateway *Gateway
	killed  bool // the host died: its next gateway boots on an empty directory
}

// Gateway returns the host's current worker-gateway (nil before the
// first).
func (h *Host) Gateway() *Gateway {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.gateway
}

// Manager returns the host's current manager (nil before the first).
func (h *Host) Manager() *Manager {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.manager
}

// NewFleet starts n engines, host-1 ... host-n, side by side (in
// parallel), and loads images (from the default engine) into each. It
// fails, loudly, without dockerd or the cgroup v1 freezer.
func NewFleet(n int, images ...string) (*Fleet, error) {
	if err := RequireDockerd(); err != nil {
		return nil, err
	}
	SweepStaleFleets()
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	f := &Fleet{ID: hex.EncodeToString(b)}
	f.Dir = filepath.Join(EnginesBase(), f.ID)
	if err := os.MkdirAll(f.Dir, 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(f.Dir, "owner"), []byte(ownerStamp(os.Getpid())), 0o644); err != nil {
		return nil, err
	}
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("host-%d", i)
		e, err := NewEngine(filepath.Join(f.Dir, id), id, "agentvisor-fleet-"+f.ID+"-"+id)
		if err != nil {
			f.Close()
			return nil, err
		}
		// The gateway's directory is a short one of its own (a socket's
		// path is at most 107 bytes), named by a link in the fleet's
		// directory so that a sweep finds it.
		gw, err := gatewayDir()
		if err != nil {
			f.Close()
			return nil, err
		}
		h := &Host{ID: id, Engine: e, GatewayDir: gw}
		f.Hosts = append(f.Hosts, h)
		if err := os.Symlink(gw, filepath.Join(f.Dir, id+gatewayLink)); err != nil {
			f.Close()
			return nil, err
		}
	}
	var archive string
	var saveErr error
	var saved sync.WaitGroup
	if len(images) > 0 {
		saved.Add(1)
		go func() {
			defer saved.Done()
			archive = filepath.Join(f.Dir, "images.tar")
			saveErr = saveImages(archive, images)
		}()
	}
	err := f.each(func(h *Host) error {
		if err := h.Engine.Start(); err != nil {
			return err
		}
		saved.Wait()
		if saveErr != nil || archive == "" {
			return saveErr
		}
		return h.Engine.Load(archive)
	})
	if archive != "" {
		_ = os.Remove(archive)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// each runs fn for every host at once and joins their errors.
func (f *Fleet) each(fn func(h *Host) error) error {
	errs := make([]error, len(f.Hosts))
	var wg sync.WaitGroup
	for i, h := range f.Hosts {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = fn(h) }()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Host returns the host named id (nil when none).
func (f *Fleet) Host(id string) *Host {
	for _, h := range f.Hosts {
		if h.ID == id {
			return h
		}
	}
	return nil
}

// saveImages writes images of the default engine to one archive (their
// shared layers once).
func saveImages(archive string, images []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", append([]string{"save", "-o", archive}, images...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("faults: docker save %s: %v\n%s", strings.Join(images, " "), err, out)
	}
	return nil
}

// HostEnv is what a host's manager needs on top of a fleet-wide
// environment: its engine, its host id and its gateway's directory.
func (h *Host) HostEnv() map[string]string {
	return map[string]string{"DOCKER_HOST": h.Engine.Host(), "HOST_ID": h.ID, "GATEWAY_DIR": h.GatewayDir}
}

// StartManager starts a worker-manager for the host (env plus HostEnv;
// MANAGER_ID id unless env sets it; DOCKER_HOST the host's engine unless
// env points it elsewhere, a DockerProxy in front of that engine) and
// moves it into the host's cgroups: it dies with the host. Its workers
// sealed (unless env sets another WORKER_NETWORK_MODE), the host's
// gateway is started first when it does not run (StartGateway). Its log
// goes under dir.
func (h *Host) StartManager(dir, id string, env map[string]string) (*Manager, error) {
	// The managers of the simulated hosts share this machine's hostname,
	// the default MANAGER_ID: the same consumer name in the managers'
	// group would have each take the others' commands for its own.
	all := map[string]string{"MANAGER_ID": id}
	for k, v := range env {
		all[k] = v
	}
	for k, v := range h.HostEnv() {
		if _, set := env[k]; !set || k != "DOCKER_HOST" {
			all[k] = v
		}
	}
	if mode := all["WORKER_NETWORK_MODE"]; mode == "" || mode == "sealed" {
		upstream, err := upstreamOf(cmp.Or(all["WORKER_REDIS_URL"], all["REDIS_URL"]))
		if err != nil {
			return nil, err
		}
		if _, err := h.StartGateway(dir, upstream); err != nil {
			return nil, err
		}
	}
	m, err := startManager(dir, id, all)
	if err != nil {
		return nil, err
	}
	if err := h.Engine.Adopt(m.Pid()); err != nil {
		m.Kill()
		return nil, err
	}
	h.mu.Lock()
	h.manager = m
	h.mu.Unlock()
	return m, nil
}

// StartGateway starts the host's worker-gateway on GatewayDir, relaying
// to upstream (host:port), unless it runs already, and moves it into the
// host's cgroups like the manager: it dies with the host. After the host
// died, the directory is emptied first, as a reboot empties /run. Its log
// goes under logDir.
func (h *Host) StartGateway(logDir, upstream string) (*Gateway, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if g := h.gateway; g != nil && g.Running() {
		if g.Upstream != upstream {
			return nil, fmt.Errorf("faults: host %s: its gateway relays to %s, not %s", h.ID, g.Upstream, upstream)
		}
		return g, nil
	}
	if h.killed {
		if err := os.RemoveAll(h.GatewayDir); err != nil {
			return nil, err
		}
		h.killed = false
	}
	g, err := startGateway(h.GatewayDir, logDir, upstream)
	if err != nil {
		return nil, fmt.Errorf("faults: host %s: %w", h.ID, err)
	}
	if err := h.Engine.Adopt(g.Pid()); err != nil {
		g.Kill()
		return nil, err
	}
	h.gateway = g
	return g, nil
}

// Kill is the host's death (Engine.Kill: its manager, gateway, dockerd,
// containerd, shims and containers, all at once); it returns the moment
// of death and how many processes died.
func (h *Host) Kill() (time.Time, int, error) {
	n := len(h.Engine.Pids())
	at, err := h.Engine.Kill()
	if m := h.Manager(); m != nil {
		<-m.Exited()
	}
	h.mu.Lock()
	g := h.gateway
	h.killed = true
	h.mu.Unlock()
	if g != nil {
		select {
		case <-g.Exited():
		case <-time.After(5 * time.Second):
			err = errors.Join(err, fmt.Errorf("faults: host %s: its gateway (pid %d) outlived the host's death", h.ID, g.Pid()))
		}
	}
	return at, n, err
}

// Close stops and removes every engine of the fleet and its directory.
func (f *Fleet) Close() error {
	err := f.each(func(h *Host) error {
		if m := h.Manager(); m != nil && m.Running() {
			m.Kill()
		}
		err := h.Engine.Remove()
		// The gateway last: the engine's SIGTERM stops the containers,
		// whose wrappers reach Redis through it until then.
		if g := h.Gateway(); g != nil && g.Running() {
			g.Kill()
		}
		if rmErr := os.RemoveAll(h.GatewayDir); rmErr != nil {
			err = errors.Join(err, rmErr)
		}
		return err
	})
	if rmErr := os.RemoveAll(f.Dir); rmErr != nil {
		err = errors.Join(err, rmErr)
	}
	return err
}

// gatewayLink ends the name of a host's link, in the fleet's directory,
// to its gateway's directory.
const gatewayLink = "-gw"

// removeGatewayDir removes the gateway directory link names: one that
// gatewayDir made (in the temporary directory, named gw...), nothing
// else.
func removeGatewayDir(link string) {
	target, err := os.Readlink(link)
	if err != nil || filepath.Dir(target) != filepath.Clean(os.TempDir()) || !strings.HasPrefix(filepath.Base(target), "gw") {
		return
	}
	_ = os.RemoveAll(target)
}

// ownerStamp identifies a live process: its pid and start time (a pid
// reused by another process has another start time).
func ownerStamp(pid int) string {
	return strconv.Itoa(pid) + " " + procStart(pid)
}

func procStart(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		if f := strings.Fields(s[i+1:]); len(f) > 19 {
			return f[19] // starttime, field 22
		}
	}
	return ""
}

// SweepStaleFleets removes the fleets whose owning process is gone: their
// engines and everything of them are killed, unmounted and removed. A
// fleet of a live process (another checkout's suite) is left alone.
func SweepStaleFleets() {
	dirs, _ := os.ReadDir(EnginesBase())
	for _, d := range dirs {
		dir := filepath.Join(EnginesBase(), d.Name())
		b, _ := os.ReadFile(filepath.Join(dir, "owner"))
		f := strings.Fields(string(b))
		if len(f) == 2 {
			if pid, err := strconv.Atoi(f[0]); err == nil && procStart(pid) == f[1] {
				continue
			}
		}
		hosts, _ := os.ReadDir(dir)
		for _, h := range hosts {
			if h.Type()&os.ModeSymlink != 0 && strings.HasSuffix(h.Name(), gatewayLink) {
				removeGatewayDir(filepath.Join(dir, h.Name()))
			}
			if h.IsDir() {
				e := &Engine{Name: h.Name(), Dir: filepath.Join(dir, h.Name()), Cgroup: "agentvisor-fleet-" + d.Name() + "-" + h.Name()}
				_ = e.Remove()
			}
		}
		_ = os.RemoveAll(dir)
	}
}

// WorkerImage returns the tag of the worker image the managers build for
// a Claude worker without capabilities on BaseImage (protocol.Recipe).
func WorkerImage() (string, error) {
	id, err := docker("image", "inspect", "-f", "{{.Id}}", BaseImage)
	if err != nil {
		return "", fmt.Errorf("faults: inspect %s: %v %s", BaseImage, err, id)
	}
	return protocol.Recipe{Agent: protocol.AgentClaude, BaseImage: strings.TrimSpace(string(id))}.Tag()
}

// EnsureWorkerImage makes sure the default engine has WorkerImage, so that
// the fleet's engines get it by docker load instead of each building it
// (an apt-get and a download per engine): when it is missing, a manager
// on the default engine (key prefix of its own, on redisURL) is asked for
// one worker, and stopped, which removes the worker and keeps the image.
func EnsureWorkerImage(redisURL, logDir string) (string, error) {
	tag, err := WorkerImage()
	if err != nil {
		return "", err
	}
	if _, err := docker("image", "inspect", "-f", "{{.Id}}", tag); err == nil {
		return tag, nil
	}
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	keys, err := protocol.NewKeys("faults-warm-" + hex.EncodeToString(b))
	if err != nil {
		return "", err
	}
	env := map[string]string{
		"REDIS_URL": redisURL, "WORKER_KEY_PREFIX": keys.Prefix, "MANAGER_ID": "warm", "METRICS_ADDR": "off",
		"WORKER_BASE_IMAGE": BaseImage, "WORKER_PROJECT_VOLUMES": "false", "WORKER_STOP_TIMEOUT": StopTimeout.String(),
		"WORKER_ENV": `{"AGENT_BIN":"` + FakeAgent + `"}`,
	}
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		env["DOCKER_HOST"] = h
	}
	// Its worker is sealed, like every worker of the suite: a gateway of
	// its own.
	upstream, err := upstreamOf(redisURL)
	if err != nil {
		return "", err
	}
	gwDir, err := gatewayDir()
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(gwDir)
	g, err := startGateway(gwDir, logDir, upstream)
	if err != nil {
		return "", err
	}
	defer g.terminate(10 * time.Second)
	env["GATEWAY_DIR"] = gwDir
	m, err := startManager(logDir, "warm", env)
	if err != nil {
		return "", err
	}
	defer m.Terminate(StopTimeout + 10*time.Second)
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		return "", err
	}
	rc := redis.NewClient(opt)
	defer rc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	replies := keys.Replies("warm")
	spec := protocol.WorkerSpec{AgentType: protocol.AgentClaude}
	cmd := protocol.Command{ID: "warm-create", Action: protocol.ActionCreate, Spec: &spec, ReplyTo: replies, Timestamp: time.Now().UTC()}
	doc, err := cmd.Encode()
	if err != nil {
		return "", err
	}
	if err := rc.XAdd(ctx, &redis.XAddArgs{Stream: keys.Commands(), Values: protocol.Values(doc)}).Err(); err != nil {
		return "", err
	}
	res, err := rc.XRead(ctx, &redis.XReadArgs{Streams: []string{replies, "0"}, Block: 5 * time.Minute}).Result()
	if err != nil {
		return "", fmt.Errorf("faults: build the worker image %s on the default engine: no reply (%v); the manager's log:\n%s", tag, err, m.LogTail(20))
	}
	defer rc.Del(context.Background(), replies)
	data, _ := protocol.EntryData(res[0].Messages[0].Values)
	if r, err := protocol.DecodeReply(data); err != nil || !r.OK {
		return "", fmt.Errorf("faults: build the worker image %s on the default engine: %s; the manager's log:\n%s", tag, data, m.LogTail(20))
	}
	return tag, nil
}

// Alive reports whether a process runs (not a zombie).
func Alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

// Fleet starts n simulated hosts for the case (NewFleet), with BaseImage
// and the worker image loaded into each engine; they are stopped and
// removed when the case ends, after the count of the containers left.
func (c *Case) Fleet(n int) *Fleet {
	c.T.Helper()
	tag, err := EnsureWorkerImage(c.Redis.URL(), c.T.TempDir())
	if err != nil {
		c.T.Fatal(err)
	}
	t0 := time.Now()
	f, err := NewFleet(n, BaseImage, tag)
	if err != nil {
		c.T.Fatal(err)
	}
	c.T.Logf("fleet %s: %d engines started and loaded in %s", f.ID, n, time.Since(t0).Round(time.Millisecond))
	c.mu.Lock()
	c.fleet = f
	c.mu.Unlock()
	c.AfterFinish(func() {
		if err := f.Close(); err != nil {
			c.T.Errorf("remove the fleet: %v", err)
		}
	})
	return f
}

func (c *Case) fleetHosts() []*Host {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fleet == nil {
		return nil
	}
	return c.fleet.Hosts
}

// StartHostManager starts a manager of host h (MANAGER_ID and HOST_ID
// h.ID, DOCKER_HOST its engine, moved into its cgroups: it dies with the
// host) with the case's environment changed by extra, and waits until it
// reads the command stream.
func (c *Case) StartHostManager(h *Host, extra map[string]string) *Manager {
	c.T.Helper()
	return c.launch(h.ID, extra, func(dir string, env map[string]string) (*Manager, error) { return h.StartManager(dir, h.ID, env) })
}

func hostNote(host string) string {
	if host == "" {
		return ""
	}
	return " on " + host
}
