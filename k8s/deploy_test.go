package k8s_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/client"
	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/testkit"
)

// serviceImages builds the images of images/build-services.sh and loads
// them into the cluster's containerd (scripts/k8s.sh load); it returns
// them by name (agentvisor/worker-manager, ...) with their tags.
func serviceImages(t *testing.T) map[string]string {
	t.Helper()
	cmd := exec.Command("bash", filepath.Join(testkit.Root(), "images", "build-services.sh"))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("images/build-services.sh: %v\n%s", err, stderr.String())
	}
	tags := strings.Fields(string(out))
	if len(tags) != 3 {
		t.Fatalf("images/build-services.sh printed %q, want three images", out)
	}
	load := exec.Command("bash", append([]string{filepath.Join(testkit.Root(), "scripts", "k8s.sh"), "load"}, tags...)...)
	if out, err := load.CombinedOutput(); err != nil {
		t.Fatalf("k8s.sh load: %v\n%s", err, out)
	}
	images := map[string]string{}
	for _, tag := range tags {
		name, version, _ := strings.Cut(tag, ":")
		images[name] = version
	}
	return images
}

// freePort is a loopback port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// deployOverlay is the test's overlay of deploy/kubernetes/in-cluster-redis:
// the manifests as they are, with the test's namespace, name prefix,
// images, secrets and key prefix, and what this cluster lacks made up
// for. It has no Service routing (no kube-proxy, no DNS) and no storage
// class: Redis, the managers and the gateway are on the node's network,
// Redis on a loopback port of the test's, the managers reach the API
// server on loopback, Redis's data is an emptyDir. The gateway's
// directory is one of the test's own on the node, the managers import
// the worker images they build into the node's containerd, and their
// builds trust the node's CA certificates (this machine's downloads go
// through a proxy of its own).
const deployOverlay = `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: {{NS}}
namePrefix: t{{NONCE}}-
resources:
  - {{BASE}}
images:
  - {name: agentvisor/worker-manager, newTag: "{{MANAGER_TAG}}"}
  - {name: agentvisor/worker-gateway, newTag: "{{GATEWAY_TAG}}"}
  - {name: agentvisor/redis, newTag: "{{REDIS_TAG}}"}
secretGenerator:
  - name: agentvisor-redis
    literals:
      - manager-password={{MANAGER_PW}}
      - consumer-password={{CONSUMER_PW}}
      - manager-url=redis://manager:{{MANAGER_PW}}@127.0.0.1:{{PORT}}/0
      - gateway-redis=127.0.0.1:{{PORT}}
  - name: agentvisor-operator
    literals:
      - token={{OPS_TOKEN}}
configMapGenerator:
  - name: agentvisor-manager
    behavior: merge
    literals:
      - WORKER_KEY_PREFIX={{PREFIX}}
      - WORKER_BASE_IMAGE={{FAKE_BASE}}
      - 'WORKER_ENV={"AGENT_BIN":"{{AGENT_BIN}}","SESSION_POLICY":"new"}'
      - K8S_LOAD_IMAGES={{CONTAINERD_SOCK}}
      - WORKER_STOP_TIMEOUT=15s
      - HEARTBEAT_INTERVAL=2s
patches:
  - target: {kind: StatefulSet, name: agentvisor-redis}
    patch: |
      - {op: remove, path: /spec/volumeClaimTemplates}
      - {op: add, path: /spec/template/spec/hostNetwork, value: true}
      - {op: add, path: /spec/template/spec/volumes/-, value: {name: data, emptyDir: {}}}
      - {op: replace, path: /spec/template/spec/containers/0/ports/0/containerPort, value: {{PORT}}}
      - {op: replace, path: /spec/template/spec/containers/0/env/0/value, value: "127.0.0.1"}
      - {op: replace, path: /spec/template/spec/containers/0/env/1/value, value: "{{PORT}}"}
  - target: {kind: Deployment, name: agentvisor-manager}
    patch: |
      apiVersion: apps/v1
      kind: Deployment
      metadata: {name: agentvisor-manager}
      spec:
        template:
          spec:
            hostNetwork: true
            containers:
              - name: manager
                ports: null
                env:
                  - {name: KUBERNETES_SERVICE_HOST, value: "127.0.0.1"}
                  - {name: KUBERNETES_SERVICE_PORT, value: "{{APISERVER_PORT}}"}
                  - {name: GATEWAY_DIR, value: "{{GW}}"}
                  - {name: METRICS_ADDR, value: "off"}
                volumeMounts:
                  - {name: gateway, mountPath: "{{GW}}"}
                  - {name: containerd, mountPath: "{{CONTAINERD_SOCK}}"}
                  - {name: extra-ca, mountPath: /usr/local/share/ca-certificates, readOnly: true}
            volumes:
              - {name: gateway, hostPath: {path: "{{GW}}", type: DirectoryOrCreate}}
              - {name: containerd, hostPath: {path: "{{CONTAINERD_SOCK}}", type: Socket}}
              - {name: extra-ca, hostPath: {path: /usr/local/share/ca-certificates, type: Directory}}
  - target: {kind: DaemonSet, name: agentvisor-gateway}
    patch: |
      apiVersion: apps/v1
      kind: DaemonSet
      metadata: {name: agentvisor-gateway}
      spec:
        template:
          spec:
            hostNetwork: true
            containers:
              - name: gateway
                env:
                  - {name: GATEWAY_DIR, value: "{{GW}}"}
                volumeMounts:
                  - {name: gateway, mountPath: "{{GW}}"}
            volumes:
              - {name: gateway, hostPath: {path: "{{GW}}", type: DirectoryOrCreate}}
`

// The runtime deployed as its users deploy it: `kubectl apply -k` of
// deploy/kubernetes/in-cluster-redis (through an overlay of the test's),
// the rollout of Redis, the two managers and the gateway, then the
// demo's consumer side through that Redis: a sealed worker made with a
// create command, a task sent, its output read. Everything it made goes
// with the overlay's delete.
func TestDeployedRuntime(t *testing.T) {
	env := cluster(t)
	build(t) // the fake agent's base image
	images := serviceImages(t)
	nonce := randomHex(4)
	ns := "avdeploy-" + nonce
	port := freePort(t)
	managerPW, consumerPW := randomHex(16), randomHex(16)
	gw := "/run/agentvisor-k8s/gw-" + nonce
	t.Cleanup(func() { os.RemoveAll(gw) })

	dir := t.TempDir()
	base, err := filepath.Rel(dir, filepath.Join(testkit.Root(), "deploy", "kubernetes", "in-cluster-redis"))
	if err != nil {
		t.Fatal(err)
	}
	overlay := strings.NewReplacer(
		"{{NS}}", ns, "{{NONCE}}", nonce, "{{BASE}}", base,
		"{{MANAGER_TAG}}", images["agentvisor/worker-manager"], "{{GATEWAY_TAG}}", images["agentvisor/worker-gateway"],
		"{{REDIS_TAG}}", images["agentvisor/redis"],
		"{{MANAGER_PW}}", managerPW, "{{CONSUMER_PW}}", consumerPW, "{{PORT}}", fmt.Sprint(port),
		"{{OPS_TOKEN}}", randomHex(16), "{{PREFIX}}", "k"+nonce, "{{FAKE_BASE}}", fakeBase,
		"{{AGENT_BIN}}", testkit.FakeAgentBin, "{{CONTAINERD_SOCK}}", env["CONTAINERD_SOCK"],
		"{{APISERVER_PORT}}", env["APISERVER_PORT"], "{{GW}}", gw,
	).Replace(deployOverlay)
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(overlay), 0o600); err != nil {
		t.Fatal(err)
	}
	kubectl(t, env, nil, "apply", "-k", dir)
	t.Cleanup(func() {
		if t.Failed() {
			for _, l := range []string{"app.kubernetes.io/name=agentvisor-manager", "app.kubernetes.io/name=agentvisor-gateway"} {
				t.Logf("logs of %s:\n%s", l, tail(string(kubectlMay(env, "logs", "-n", ns, "-l", l, "--tail=40", "--prefix")), 80))
			}
		}
		// The managers stop (SIGTERM: their workers hibernated or
		// removed), then the namespace goes with what is left in it.
		// Asked across the cluster (the namespace is gone), so that a
		// failing kubectl fails the test rather than reading as nothing.
		kubectl(t, env, nil, "delete", "-k", dir, "--ignore-not-found", "--timeout=3m")
		left := strings.Fields(string(kubectl(t, env, nil, "get", "pods,pvc", "-A", "--field-selector", "metadata.namespace="+ns, "-o", "name")))
		for _, name := range strings.Fields(string(kubectl(t, env, nil, "get", "namespaces,clusterroles,clusterrolebindings", "-o", "name"))) {
			if name == "namespace/"+ns || strings.Contains(name, "/t"+nonce+"-") {
				left = append(left, name)
			}
		}
		if len(left) > 0 {
			t.Errorf("left after the delete: %s", strings.Join(left, " "))
		}
	})

	for _, w := range []string{"statefulset/t" + nonce + "-agentvisor-redis", "deployment/t" + nonce + "-agentvisor-manager", "daemonset/t" + nonce + "-agentvisor-gateway"} {
		kubectl(t, env, nil, "rollout", "status", "-n", ns, w, "--timeout=3m")
	}
	var managers struct{ Items []pod }
	if err := json.Unmarshal(kubectl(t, env, nil, "get", "pods", "-n", ns, "-l", "app.kubernetes.io/name=agentvisor-manager", "-o", "json"), &managers); err != nil {
		t.Fatal(err)
	}
	if len(managers.Items) != 2 {
		t.Fatalf("%d manager pods, want the Deployment's 2", len(managers.Items))
	}

	// The consumer's side, as the demo's: the consumer user of that Redis.
	rc := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), Username: "consumer", Password: consumerPW})
	t.Cleanup(func() { rc.Close() })
	keys := protocol.Keys{Prefix: "k" + nonce}
	commands := &client.Commands{Redis: rc, Keys: keys, Timeout: 4 * time.Minute}
	tasks := &client.Tasks{Redis: rc, Keys: keys}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	if err := rc.Ping(ctx).Err(); err != nil {
		t.Fatalf("the consumer's Redis: %v", err)
	}
	anon := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port)})
	if err := anon.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("the in-cluster Redis answered a client without a password: %v", err)
	}
	anon.Close()

	spec := protocol.WorkerSpec{AgentType: protocol.AgentClaude, Kind: protocol.KindLongLived}
	rep, err := commands.Do(ctx, protocol.Command{Action: protocol.ActionCreate, Spec: &spec})
	if err != nil || rep.Worker == nil {
		t.Fatalf("create: %+v, %v", rep, err)
	}
	id := rep.Worker.WorkerID
	var wp pod
	if err := json.Unmarshal(kubectl(t, env, nil, "get", "pod", "-n", ns, "agentvisor-"+id, "-o", "json"), &wp); err != nil {
		t.Fatal(err)
	}
	if wp.Spec.HostNetwork {
		t.Error("the worker's pod is on the node's network: it should be sealed")
	}
	out, err := tasks.Run(ctx, id, protocol.Task{Prompt: "say hello"}, nil)
	if err != nil || out.Status != protocol.StatusComplete {
		t.Fatalf("a task through the deployed runtime: %+v, %v", out, err)
	}
	t.Logf("worker %s answered %s in %d ms", id, out.Status, out.DurationMS)
	if _, err := commands.Do(ctx, protocol.Command{Action: protocol.ActionDelete, WorkerID: id}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	// The manager removes its worker's pod itself, before the namespace
	// would take it.
	kubectl(t, env, nil, "wait", "--for=delete", "-n", ns, "pod/agentvisor-"+id, "--timeout=90s")
}

// kubectlMay is kubectl whose failure is no test's: what it printed, or
// nothing.
func kubectlMay(env map[string]string, args ...string) []byte {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, _ := exec.CommandContext(ctx, env["KUBECTL"], append([]string{"--kubeconfig", env["KUBECONFIG"]}, args...)...).Output()
	return out
}
