package k8s_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/client"
	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/testkit"
)

// These tests run the real worker-manager with WORKER_ENGINE=kubernetes
// on the cluster of `make k8s`: workers are pods, fed and answered over
// a Redis of the test's own, exactly as on Docker. The agent is the
// wrapper's fake one (testkit.BuildFakeAgentImage), so a task's prompt
// says what it does ("fake:sleep-20000").

// fakeBase is the worker base image with the fake agent, built from this
// checkout and imported into the cluster by the manager (K8S_LOAD_IMAGES).
const fakeBase = "agentvisor/worker-base-k8s:latest"

var (
	buildOnce              sync.Once
	buildErr               error
	managerBin, gatewayBin string
)

// build makes the fake agent's base image, worker-manager and
// worker-gateway, once.
func build(t testing.TB) {
	t.Helper()
	buildOnce.Do(func() {
		if buildErr = testkit.BuildFakeAgentImage(fakeBase, "worker-base-k8s"); buildErr != nil {
			return
		}
		dir, err := os.MkdirTemp("", "agentvisor-k8s-test-")
		if err != nil {
			buildErr = err
			return
		}
		managerBin, gatewayBin = filepath.Join(dir, "worker-manager"), filepath.Join(dir, "worker-gateway")
		for _, b := range []struct{ module, pkg, out string }{
			{"spawner", "./cmd/worker-manager", managerBin},
			{"gateway", "./cmd/worker-gateway", gatewayBin},
		} {
			cmd := exec.Command("go", "build", "-o", b.out, b.pkg)
			cmd.Dir = filepath.Join(testkit.Root(), b.module)
			if out, err := cmd.CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("go build %s: %v\n%s", b.pkg, err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
}

// deployment is one worker-manager on the cluster, in a namespace and
// under a key prefix of its own, and the clients of its Redis.
type deployment struct {
	t        testing.TB
	env      map[string]string
	ns       string
	keys     protocol.Keys
	rc       *redis.Client
	commands *client.Commands
	tasks    *client.Tasks
	manager  *exec.Cmd
	log      string
	menv     map[string]string // the managers' environment
	user     string            // the managers' user on the cluster (their service account)
	// gatewayLog is the sealed deployment's worker-gateway's log.
	gatewayLog string
	// fc counts the requests of a fault case (nil: not one).
	fc    *faultCase
	mu    sync.Mutex
	stops []func() // each manager's final shutdown, once
}

// deploy starts a worker-manager on the cluster. Sealed, its workers are
// on the pod network with a worker-gateway on this machine (the node) as
// their only way out; else on the node's network (host).
func deploy(t testing.TB, sealed bool) *deployment {
	t.Helper()
	return deployWith(t, sealed, nil)
}

// deployWith is deploy with more of the manager's environment.
func deployWith(t testing.TB, sealed bool, extra map[string]string) *deployment {
	t.Helper()
	env := cluster(t)
	build(t)
	r, rc := testkit.StartRedisClient(t)
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	nonce := hex.EncodeToString(b)
	d := &deployment{t: t, env: env, ns: "agentvisor-" + nonce, keys: protocol.Keys{Prefix: "k" + nonce}, rc: rc}
	kubeconfig := d.install(nonce)
	// One reply stream for all the deployment's commands: a fault case
	// counts their answers on it.
	d.commands = &client.Commands{Redis: rc, Keys: d.keys, Timeout: 3 * time.Minute, Name: "k8s-test"}
	d.tasks = &client.Tasks{Redis: rc, Keys: d.keys}

	menv := map[string]string{
		"REDIS_URL": r.URL(), "WORKER_KEY_PREFIX": d.keys.Prefix, "MANAGER_ID": "k8s-" + nonce,
		"WORKER_ENGINE": "kubernetes", "KUBECONFIG": kubeconfig, "K8S_NAMESPACE": d.ns,
		"K8S_LOAD_IMAGES": env["CONTAINERD_SOCK"], "WORKER_BASE_IMAGE": fakeBase,
		"WORKER_NETWORK_MODE": "host", "WORKER_ENV": `{"AGENT_BIN":"` + testkit.FakeAgentBin + `","SESSION_POLICY":"new"}`,
		"METRICS_ADDR": "off", "WORKER_STOP_TIMEOUT": "15s", "HEARTBEAT_INTERVAL": "2s",
	}
	if sealed {
		menv["WORKER_NETWORK_MODE"], menv["GATEWAY_DIR"] = "sealed", d.startGateway(r.Addr)
	}
	for k, v := range extra {
		menv[k] = v
	}
	d.menv = menv
	d.startManager("k8s-" + nonce)
	return d
}

// startManager starts a worker-manager of the deployment as id; the
// test's end stops it (SIGTERM: it hibernates or removes its workers).
func (d *deployment) startManager(id string) {
	t := d.t
	t.Helper()
	d.log = filepath.Join(t.TempDir(), "manager-"+id+".log")
	f, err := os.Create(d.log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(managerBin)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "MANAGER_ID=" + id}
	for k, v := range d.menv {
		if k != "MANAGER_ID" {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d.manager = cmd
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	log := d.log
	var once sync.Once
	stop := func() {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(time.Minute):
				_ = cmd.Process.Kill()
				<-done
			}
			f.Close()
		})
	}
	d.mu.Lock()
	d.stops = append(d.stops, stop)
	d.mu.Unlock()
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			out, _ := os.ReadFile(log)
			t.Logf("worker-manager %s's log:\n%s", id, tail(string(out), 60))
		}
	})
}

// stopManagers is the final shutdown of the deployment's managers
// (SIGTERM, SIGKILL after a minute), as the test's end does it.
func (d *deployment) stopManagers() {
	d.mu.Lock()
	stops := append([]func(){}, d.stops...)
	d.mu.Unlock()
	for _, stop := range stops {
		stop()
	}
}

// startGateway starts a worker-gateway relaying to the Redis at addr and
// returns its directory (short: a socket path is at most 107 bytes).
func (d *deployment) startGateway(addr string) string {
	t := d.t
	dir, err := os.MkdirTemp("", "gw")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	d.gatewayLog = filepath.Join(t.TempDir(), "gateway.log")
	f, err := os.Create(d.gatewayLog)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(gatewayBin)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "GATEWAY_DIR=" + dir, "GATEWAY_REDIS=" + addr}
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); f.Close() })
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(dir, "control.sock")); err == nil {
			return dir
		}
		if time.Now().After(deadline) {
			out, _ := os.ReadFile(d.gatewayLog)
			t.Fatalf("worker-gateway did not start within 20 s:\n%s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// install applies deploy/kubernetes/base in a namespace of the test's own
// (an overlay: the namespace, and a name prefix for the cluster-wide
// role) and returns a kubeconfig of the manager's service account: the
// manager runs with the rights the manifests give it, not the admin's.
func (d *deployment) install(nonce string) string {
	t := d.t
	dir := t.TempDir()
	base, err := filepath.Rel(dir, filepath.Join(testkit.Root(), "deploy", "kubernetes", "base"))
	if err != nil {
		t.Fatal(err)
	}
	overlay := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: " + d.ns +
		"\nnamePrefix: t" + nonce + "-\nresources:\n  - " + base + "\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(overlay), 0o644); err != nil {
		t.Fatal(err)
	}
	kubectl(t, d.env, nil, "apply", "-k", dir)
	t.Cleanup(func() {
		// Nothing of the test's is left: the manager removed its pods, and
		// the namespace goes with what it holds.
		kubectl(t, d.env, nil, "delete", "-k", dir, "--wait=false", "--ignore-not-found")
	})
	sa := "t" + nonce + "-agentvisor-manager"
	d.user = "system:serviceaccount:" + d.ns + ":" + sa
	token := strings.TrimSpace(string(kubectl(t, d.env, nil, "create", "token", sa, "-n", d.ns, "--duration=2h")))
	var cfg struct {
		Clusters []struct {
			Cluster struct {
				Server string `json:"server"`
				CA     string `json:"certificate-authority-data"`
			} `json:"cluster"`
		} `json:"clusters"`
	}
	if err := json.Unmarshal(kubectl(t, d.env, nil, "config", "view", "--raw", "--minify", "-o", "json"), &cfg); err != nil || len(cfg.Clusters) != 1 {
		t.Fatalf("the admin kubeconfig's cluster: %v", err)
	}
	c := cfg.Clusters[0].Cluster
	kc := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: %s\n    certificate-authority-data: %s\n"+
		"users:\n- name: manager\n  user:\n    token: %s\ncontexts:\n- name: m\n  context:\n    cluster: c\n    user: manager\n    namespace: %s\ncurrent-context: m\n",
		c.Server, c.CA, token, d.ns)
	path := filepath.Join(dir, "manager.kubeconfig")
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// pod is what the tests read of a worker's pod.
type pod struct {
	Metadata struct {
		Name   string
		UID    string
		Labels map[string]string
	}
	Spec struct {
		NodeName                     string
		HostNetwork                  bool
		AutomountServiceAccountToken *bool
		SecurityContext              struct {
			RunAsUser    int64
			RunAsNonRoot bool
		}
		Containers []struct {
			Image     string
			Resources struct {
				Limits map[string]string
			}
			SecurityContext struct {
				AllowPrivilegeEscalation bool
				Capabilities             struct{ Drop []string }
			}
		}
		Volumes []struct{ Name string }
	}
	Status struct{ Phase string }
}

// pods returns the namespace's pods.
func (d *deployment) pods() []pod {
	d.t.Helper()
	var list struct{ Items []pod }
	if err := json.Unmarshal(kubectl(d.t, d.env, nil, "get", "pods", "-n", d.ns, "-o", "json"), &list); err != nil {
		d.t.Fatal(err)
	}
	return list.Items
}

// waitPods waits until the namespace's pods satisfy ok.
func (d *deployment) waitPods(what string, within time.Duration, ok func([]pod) bool) []pod {
	d.t.Helper()
	deadline := time.Now().Add(within)
	for {
		ps := d.pods()
		if ok(ps) {
			return ps
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("%s: not within %s (pods: %+v)", what, within, ps)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func (d *deployment) create(spec protocol.WorkerSpec) string {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rep, err := d.do(ctx, protocol.Command{Action: protocol.ActionCreate, Spec: &spec}, "create", replyOK)
	if err != nil {
		d.t.Fatalf("create: %v", err)
	}
	if rep.Worker == nil || rep.Worker.WorkerID == "" {
		d.t.Fatalf("create answered without a worker: %+v", rep)
	}
	return rep.Worker.WorkerID
}

func (d *deployment) run(worker, prompt string, within time.Duration) protocol.Output {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	sent, err := d.send(ctx, worker, prompt, complete)
	if err != nil {
		d.t.Fatalf("task %q on %s: %v", prompt, worker, err)
	}
	out, err := d.tasks.Await(ctx, sent, nil)
	if err != nil {
		d.t.Fatalf("task %q on %s: %v", prompt, worker, err)
	}
	return out
}

func (d *deployment) status(worker string) map[string]string {
	return d.rc.HGetAll(context.Background(), d.keys.Status(worker)).Val()
}

func (d *deployment) waitStatus(worker, field, want string, within time.Duration) {
	d.t.Helper()
	deadline := time.Now().Add(within)
	for d.status(worker)[field] != want {
		if time.Now().After(deadline) {
			d.t.Fatalf("worker %s: %s is %q, want %q within %s (status %v)", worker, field, d.status(worker)[field], want, within, d.status(worker))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// A long-lived worker on Kubernetes: a hardened pod made from its image,
// a task answered, the pause after the output a hibernation (the pod
// goes), the next task a wake (a new pod, the same worker), the delete
// the end of its pods.
func TestWorkerLifecycleOnKubernetes(t *testing.T) {
	d := deploy(t, false)
	id := d.create(protocol.WorkerSpec{AgentType: protocol.AgentClaude, Kind: protocol.KindLongLived})
	name := "agentvisor-" + id

	ps := d.waitPods("the worker's pod", time.Minute, func(ps []pod) bool { return len(ps) == 1 && ps[0].Status.Phase == "Running" })
	p := ps[0]
	if p.Metadata.Name != name {
		t.Errorf("pod %s, want %s", p.Metadata.Name, name)
	}
	c := p.Spec.Containers[0]
	if p.Spec.AutomountServiceAccountToken == nil || *p.Spec.AutomountServiceAccountToken || p.Spec.SecurityContext.RunAsUser != 1000 ||
		!p.Spec.SecurityContext.RunAsNonRoot || c.SecurityContext.AllowPrivilegeEscalation || strings.Join(c.SecurityContext.Capabilities.Drop, ",") != "ALL" {
		t.Errorf("the pod is not hardened: %+v", p.Spec)
	}
	if c.Resources.Limits["memory"] == "" || c.Resources.Limits["cpu"] == "" {
		t.Errorf("no limits: %v", c.Resources.Limits)
	}
	if !strings.HasPrefix(c.Image, "worker:") {
		t.Errorf("image %s, want the worker image of its recipe (worker:<hash>)", c.Image)
	}
	st := d.status(id)
	if st[protocol.StatusFieldContainerID] != name+"/"+p.Metadata.UID {
		t.Errorf("status container_id %q, want the pod's name/uid", st[protocol.StatusFieldContainerID])
	}

	out := d.run(id, "say hello", 2*time.Minute)
	if out.Status != protocol.StatusComplete {
		t.Fatalf("first task: %+v", out)
	}
	// PAUSE_AFTER_OUTPUT: the wrapper asks for a pause; no pod can be
	// frozen, so the worker hibernates and its pod goes.
	d.waitStatus(id, protocol.StatusFieldState, string(protocol.WorkerHibernated), time.Minute)
	d.waitPods("the hibernated worker's pod gone", time.Minute, func(ps []pod) bool { return len(ps) == 0 })

	out = d.run(id, "again", 3*time.Minute)
	if out.Status != protocol.StatusComplete {
		t.Fatalf("task after the hibernation: %+v", out)
	}
	if inc := d.status(id)[protocol.StatusFieldIncarnation]; inc != "2" {
		t.Errorf("incarnation %q after a wake, want 2", inc)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := d.commands.Do(ctx, protocol.Command{Action: protocol.ActionDelete, WorkerID: id}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	d.waitPods("no pod after the delete", time.Minute, func(ps []pod) bool { return len(ps) == 0 })
}

// A worker's pod deleted by someone else in the middle of a task: the
// task is answered once, with an error, the worker's pod is not left
// behind or made twice, and the worker serves its next task.
func TestPodDeletedMidTask(t *testing.T) {
	d := deploy(t, false)
	fc := d.faultCase("k8s: worker pod deleted mid-task",
		"A busy long-lived worker's pod is deleted by someone else (`kubectl delete pod --grace-period=0 --force`) in the middle of its task.",
		"the worker serves its next task (a new pod, the same worker; bound 3 min).",
		"from the delete to the task's failed Output.")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	id, sent := d.busyWorker(ctx, "fake:sleep-60000", func(a answer) bool { return !a.ok })
	fc.Inject()
	kubectl(t, d.env, nil, "delete", "pod", "agentvisor-"+id, "-n", d.ns, "--grace-period=0", "--force")

	out, err := d.tasks.Await(ctx, sent, nil)
	if err != nil {
		t.Fatalf("the task was not answered: %v", err)
	}
	fc.Detected()
	if out.Status == protocol.StatusComplete {
		t.Fatalf("a task whose pod was deleted completed: %+v", out)
	}
	t.Logf("answered %s %s: %s", out.Status, out.Error.Code, out.Error.Message)
	fc.Note("the task answered %s %s", out.Status, out.Error.Code)
	// Answered once: one output on its stream for the request.
	n := 0
	for _, m := range d.rc.XRange(ctx, sent.Output, "-", "+").Val() {
		data, _ := protocol.EntryData(m.Values)
		if o, err := protocol.DecodeOutput(data); err == nil && o.RequestID == sent.RequestID {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d outputs for the task, want 1", n)
	}
	time.Sleep(5 * time.Second)
	if ps := d.pods(); len(ps) > 1 {
		t.Errorf("%d pods for one worker: %+v", len(ps), ps)
	}
	if out := d.run(id, "after the delete", 3*time.Minute); out.Status != protocol.StatusComplete {
		t.Fatalf("the next task of the worker whose pod was deleted: %+v", out)
	}
	fc.Recovered()
}

// escapeProbe runs inside a sealed worker's pod as its agent's user: what
// it must not reach. Each line it prints is a refusal held; "reached:"
// lines are escapes.
const escapeProbe = `
set -u
# The probe itself: its settings given, and run in a sealed worker (its
# gateway's sockets mounted) with bash's /dev/tcp able to connect.
for v in BRIDGE_IP APISERVER_PORT NODE_IP KUBELET_PORT REDIS_PORT; do [ -n "${!v:-}" ] || echo "broken: $v is not set"; done
[ -S /run/agentvisor/redis.sock ] || echo "broken: no gateway socket at /run/agentvisor/redis.sock"
check() { if (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; then echo "reached: $3 ($1:$2)"; else echo "refused: $3"; fi; }
[ -e /var/run/secrets/kubernetes.io/serviceaccount/token ] && echo "reached: a service-account token" || echo "refused: no service-account token"
check "$BRIDGE_IP" "$APISERVER_PORT" "the API server on the node's address"
check 127.0.0.1 "$APISERVER_PORT" "the API server on loopback"
check 10.214.0.1 443 "the API server's service address"
check "$NODE_IP" "$KUBELET_PORT" "the kubelet on the node's address"
check "$BRIDGE_IP" "$KUBELET_PORT" "the kubelet on the bridge's address"
check 127.0.0.1 "$REDIS_PORT" "Redis over TCP on the pod's loopback"
check "$BRIDGE_IP" "$REDIS_PORT" "Redis over TCP on the node's address"
default=$(awk 'NR > 1 && $2 == "00000000" {n++} END {print n+0}' /proc/net/route)
[ "$default" = 0 ] && echo "refused: no default route" || echo "reached: a default route"
echo "probe done"
`

// A sealed worker on Kubernetes: its pod on the pod network, its way out
// the gateway's sockets mounted from the node; a task answered through
// them; and, probed from inside the pod as its agent's user, no
// service-account token, no API server, no kubelet, no Redis over TCP,
// no route out.
func TestSealedWorkerPod(t *testing.T) {
	d := deploy(t, true)
	id := d.create(protocol.WorkerSpec{AgentType: protocol.AgentClaude, Kind: protocol.KindLongLived})
	ps := d.waitPods("the sealed worker's pod", time.Minute, func(ps []pod) bool { return len(ps) == 1 && ps[0].Status.Phase == "Running" })
	if ps[0].Spec.HostNetwork {
		t.Fatal("a sealed worker's pod is on the node's network")
	}
	out := d.run(id, "say hello", 2*time.Minute)
	if out.Status != protocol.StatusComplete {
		t.Fatalf("a task through the gateway: %+v", out)
	}
	// The wrapper asks for a pause after the output: wait until it has
	// hibernated, then wake it with a task that holds it busy while the
	// probe runs.
	d.waitPods("the hibernated worker's pod gone", time.Minute, func(ps []pod) bool { return len(ps) == 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := d.tasks.Send(ctx, id, protocol.Task{Prompt: "fake:sleep-30000"}); err != nil {
		t.Fatal(err)
	}
	d.waitStatus(id, protocol.StatusFieldState, string(protocol.WorkerBusy), 2*time.Minute)
	_, redisPort, _ := strings.Cut(strings.TrimPrefix(d.rc.Options().Addr, "127.0.0.1"), ":")
	probe := "BRIDGE_IP=" + d.env["BRIDGE_IP"] + " APISERVER_PORT=" + d.env["APISERVER_PORT"] + " NODE_IP=" + d.env["NODE_IP"] + " KUBELET_PORT=" + d.env["KUBELET_PORT"] + " REDIS_PORT=" + redisPort + "\n" + escapeProbe
	got := string(kubectl(t, d.env, []byte(probe), "exec", "-i", "-n", d.ns, "agentvisor-"+id, "--", "/bin/bash", "-s"))
	t.Logf("probe:\n%s", got)
	if !strings.Contains(got, "probe done") {
		t.Fatal("the probe did not finish")
	}
	if strings.Contains(got, "reached:") {
		t.Error("a sealed worker's pod reached what it must not")
	}
	if strings.Contains(got, "broken:") || strings.Count(got, "refused:") != 9 {
		t.Error("the probe did not run as it should: its checks prove nothing")
	}
}

// A warm pool on Kubernetes: its warm worker waits as a running pod (no
// pod can be paused), a create of its spec is given that pod, and once
// the allocated worker has hibernated after its output, its wake is
// backed by the next warm pod, which the engine gives to the woken
// worker (a pod's name cannot change: the worker it serves is a label).
func TestWarmPoolOnKubernetes(t *testing.T) {
	spec := protocol.WorkerSpec{AgentType: protocol.AgentClaude, Kind: protocol.KindLongLived}
	doc, _ := json.Marshal(spec)
	d := deployWith(t, false, map[string]string{"POOLS": `[{"name":"p","spec":` + string(doc) + `,"min_warm":1,"max_total":4}]`})
	warm := func() []string { return d.rc.SMembers(context.Background(), d.keys.Prefix+":pool:p:warm").Val() }
	waitWarm := func() string {
		t.Helper()
		deadline := time.Now().Add(3 * time.Minute)
		for len(warm()) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("no warm worker within 3 min (pods %+v)", d.pods())
			}
			time.Sleep(200 * time.Millisecond)
		}
		return warm()[0]
	}
	first := waitWarm()
	id := d.create(spec)
	if id != first {
		t.Fatalf("the create made %s, not the warm worker %s", id, first)
	}
	if st := d.status(id); st[protocol.StatusFieldPoolState] != protocol.PoolAllocated {
		t.Fatalf("pool state %q, want allocated", st[protocol.StatusFieldPoolState])
	}
	if out := d.run(id, "say hello", 2*time.Minute); out.Status != protocol.StatusComplete {
		t.Fatalf("task on the allocated worker: %+v", out)
	}
	d.waitStatus(id, protocol.StatusFieldState, string(protocol.WorkerHibernated), time.Minute)
	next := waitWarm()
	if out := d.run(id, "again", 3*time.Minute); out.Status != protocol.StatusComplete {
		t.Fatalf("task after the hibernation: %+v", out)
	}
	var serving []string
	for _, p := range d.pods() {
		if p.Metadata.Labels["io.agentvisor.serves"] != "" {
			serving = append(serving, p.Metadata.Name+" serves "+p.Metadata.Labels["io.agentvisor.serves"])
		}
	}
	want := "agentvisor-" + next + " serves " + id
	if len(serving) != 1 || serving[0] != want {
		t.Errorf("pods given to another worker: %v, want [%s]", serving, want)
	}
}

// The manager killed (SIGKILL) in the middle of creates, a second one
// started: every create is answered once, and the pods are exactly the
// workers made (a pod the dead manager left behind its start gate is
// started or removed by the next one's reconciliation).
func TestManagerKilledMidCreate(t *testing.T) {
	d := deployWith(t, false, map[string]string{"LEASE_TTL": "3s", "CREATION_GRACE": "10s", "RECONCILE_INTERVAL": "2s"})
	fc := d.faultCase("k8s: manager killed mid-create",
		"The worker-manager is SIGKILLed as soon as the first pod of 4 concurrent creates exists; a second manager is started at once (LEASE_TTL=3s, CREATION_GRACE=10s).",
		"every create answered, the pods exactly one per worker made, each serving a task (bound 4 min).", "")
	const n = 4
	type made struct {
		id  string
		err error
	}
	answers := make(chan made, n)
	for i := 0; i < n; i++ {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			spec := protocol.WorkerSpec{AgentType: protocol.AgentClaude, Kind: protocol.KindLongLived}
			rep, err := d.do(ctx, protocol.Command{Action: protocol.ActionCreate, Spec: &spec}, "create across the kill", nil)
			if err == nil && rep.Worker != nil {
				answers <- made{id: rep.Worker.WorkerID}
				return
			}
			answers <- made{err: err}
		}()
	}
	// Kill it as soon as its first pod exists.
	d.waitPods("a first pod", 3*time.Minute, func(ps []pod) bool { return len(ps) > 0 })
	fc.Inject()
	_ = d.manager.Process.Kill()
	d.startManager("second")

	var ids []string
	for i := 0; i < n; i++ {
		a := <-answers
		if a.err != nil {
			t.Logf("a create answered with an error: %v", a.err)
			continue
		}
		ids = append(ids, a.id)
	}
	if len(ids) == 0 {
		t.Fatal("no create was carried out")
	}
	// Once the reconciliation has run, the pods are the workers made.
	d.servesExactly(ids, "after the kill")
	fc.Recovered()
	t.Logf("%d of %d creates made a worker; %d pods", len(ids), n, len(d.pods()))
	fc.Note("%d of %d creates made a worker", len(ids), n)
}

// The kubelet restarted while a task runs: the pod's containers outlive
// it (containerd keeps them), and the task is answered, once, complete.
func TestKubeletRestartedMidTask(t *testing.T) {
	d := deploy(t, false)
	fc := d.faultCase("k8s: kubelet restarted mid-task",
		"The node's kubelet is SIGKILLed and started again (`k8s.sh up`) while a worker's 8 s task runs.",
		"the task completes, on the same pod (containerd keeps its container across the kubelet's restart; bound 3 min).", "")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	id, sent := d.busyWorker(ctx, "fake:sleep-8000", complete)
	fc.Inject()
	restartComponent(t, "kubelet", 0)
	out, err := d.tasks.Await(ctx, sent, nil)
	if err != nil || out.Status != protocol.StatusComplete {
		t.Fatalf("the task across a kubelet restart: %+v, %v", out, err)
	}
	fc.Recovered()
	if ps := d.pods(); len(ps) != 1 || ps[0].Metadata.Name != "agentvisor-"+id {
		t.Errorf("pods after the restart: %+v", ps)
	}
}

// restartComponent kills one of the cluster's processes (SIGKILL), waits
// down, and starts it again (k8s.sh up starts what does not run).
func restartComponent(t testing.TB, name string, down time.Duration) {
	t.Helper()
	pid, err := os.ReadFile("/run/agentvisor-k8s/" + name + ".pid")
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(strings.TrimSpace(string(pid)))
	if err := syscall.Kill(p, syscall.SIGKILL); err != nil {
		t.Fatalf("kill %s (%d): %v", name, p, err)
	}
	time.Sleep(down)
	up := exec.Command("bash", filepath.Join(testkit.Root(), "scripts", "k8s.sh"), "up")
	if out, err := up.CombinedOutput(); err != nil {
		t.Fatalf("k8s.sh up after killing %s: %v\n%s", name, err, out)
	}
}

// The API server killed while creates are in flight and down for 5 s:
// every create is answered once (made, or refused with an error), the
// pods are exactly the workers made, and each of those serves a task.
func TestAPIServerRestartedDuringCreates(t *testing.T) {
	// The suite's lease (faults/: LEASE_TTL=3s): a retirement refused by
	// the API server as it comes back is finished by the leader after it.
	d := deployWith(t, false, map[string]string{"LEASE_TTL": "3s"})
	fc := d.faultCase("k8s: API server restarted during creates",
		"The API server is SIGKILLed while 3 creates are in flight, down 5 s, and started again (LEASE_TTL=3s).",
		"every create answered (made, or refused with an error), the pods exactly one per worker made, each serving a task (bound 4 min).", "")
	// The image is imported before the fault: the creates under test are
	// the API's, not an import's.
	first := d.create(protocol.WorkerSpec{AgentType: protocol.AgentClaude, Kind: protocol.KindLongLived})
	const n = 3
	errs := make(chan error, n)
	ids := make(chan string, n)
	for i := 0; i < n; i++ {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			spec := protocol.WorkerSpec{AgentType: protocol.AgentClaude, Kind: protocol.KindLongLived}
			rep, err := d.do(ctx, protocol.Command{Action: protocol.ActionCreate, Spec: &spec}, "create during the outage", nil)
			if err == nil && rep.Worker != nil {
				ids <- rep.Worker.WorkerID
			}
			errs <- err
		}()
	}
	fc.Inject()
	restartComponent(t, "kube-apiserver", 5*time.Second)
	made := []string{first}
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			t.Logf("a create answered with an error: %v", err)
		}
	}
	close(ids)
	for id := range ids {
		made = append(made, id)
	}
	d.servesExactly(made, "after the restart")
	fc.Recovered()
	t.Logf("%d of %d creates during the outage made a worker", len(made)-1, n)
	fc.Note("%d of %d creates during the outage made a worker", len(made)-1, n)
}

// servesExactly waits until the pods are exactly one per worker of made
// and each of those workers is registered (none still being retired: a
// retirement whose removal failed is finished by the leader once its
// lease runs out), then has each of them serve a task.
func (d *deployment) servesExactly(made []string, prompt string) {
	d.t.Helper()
	want := map[string]bool{}
	for _, id := range made {
		want["agentvisor-"+id] = true
	}
	d.waitPods("one pod per worker made, none else, each worker registered", 2*time.Minute, func(ps []pod) bool {
		if len(ps) != len(want) {
			return false
		}
		for _, id := range made {
			if !d.rc.SIsMember(context.Background(), d.keys.Workers(), id).Val() {
				return false
			}
		}
		for _, p := range ps {
			if !want[p.Metadata.Name] {
				return false
			}
		}
		return true
	})
	for _, id := range made {
		if out := d.run(id, prompt, 3*time.Minute); out.Status != protocol.StatusComplete {
			d.t.Errorf("worker %s: %+v", id, out)
		}
	}
}

// busyWorker creates a long-lived worker, waits for its running pod and
// sends it prompt (whose answer must satisfy ok), and returns once the
// worker is busy with it.
func (d *deployment) busyWorker(ctx context.Context, prompt string, ok func(answer) bool) (string, client.Sent) {
	d.t.Helper()
	id := d.create(protocol.WorkerSpec{AgentType: protocol.AgentClaude, Kind: protocol.KindLongLived})
	d.waitPods("the worker's pod", time.Minute, func(ps []pod) bool { return len(ps) == 1 && ps[0].Status.Phase == "Running" })
	sent, err := d.send(ctx, id, prompt, ok)
	if err != nil {
		d.t.Fatal(err)
	}
	d.waitStatus(id, protocol.StatusFieldState, string(protocol.WorkerBusy), time.Minute)
	return id, sent
}
