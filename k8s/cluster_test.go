package k8s_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// clusterEnv is where `scripts/k8s.sh up` writes the running cluster's
// settings (kubeconfig, kubectl, ports, the pod network).
const clusterEnv = "/run/agentvisor-k8s/cluster.env"

// cluster reads the settings of the running cluster; without one the
// test fails (these tests need `make k8s`: `make test-k8s` starts it and
// runs them; the module is not among make test's).
func cluster(t testing.TB) map[string]string {
	t.Helper()
	f, err := os.Open(clusterEnv)
	if err != nil {
		t.Fatalf("the cluster's settings (is it up? make k8s): %v", err)
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			env[k] = v
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read %s: %v", clusterEnv, err)
	}
	return env
}

// kubectl runs the cluster's own kubectl with the admin kubeconfig and
// returns its standard output.
func kubectl(t testing.TB, env map[string]string, stdin []byte, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, env["KUBECTL"], append([]string{"--kubeconfig", env["KUBECONFIG"]}, args...)...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

func TestNodeReady(t *testing.T) {
	env := cluster(t)
	var node struct {
		Status struct {
			Conditions []struct{ Type, Status string }
			Addresses  []struct{ Type, Address string }
		}
	}
	if err := json.Unmarshal(kubectl(t, env, nil, "get", "node", env["NODE_NAME"], "-o", "json"), &node); err != nil {
		t.Fatalf("decode the node: %v", err)
	}
	ready := false
	for _, c := range node.Status.Conditions {
		if c.Type == "Ready" {
			ready = c.Status == "True"
		}
	}
	if !ready {
		t.Errorf("node %s is not Ready: %+v", env["NODE_NAME"], node.Status.Conditions)
	}
	for _, a := range node.Status.Addresses {
		if a.Type == "InternalIP" && a.Address != env["NODE_IP"] {
			t.Errorf("the node's address is %s, want its dummy interface's %s", a.Address, env["NODE_IP"])
		}
	}
}

// probe is the worker pod's command: each check prints what it found and
// the script exits non-zero at the first that fails.
const probe = `set -u
fail() { echo "FAIL: $*"; exit 1; }
[ -e /var/run/secrets/kubernetes.io/serviceaccount ] && fail "a service-account token is mounted"
[ "$(id -u)" = 1000 ] || fail "runs as uid $(id -u), not 1000"
# The routing table: the pod's own subnet and nothing else (no default route).
routes=$(awk 'NR > 1 && $1 != "lo" {print $2}' /proc/net/route | sort -u)
[ "$routes" = "$POD_NET_HEX" ] || fail "routes: $routes, want only $POD_NET_HEX"
# The API server listens on the host's loopback only: not on the bridge.
if (exec 3<>"/dev/tcp/$BRIDGE_IP/$APISERVER_PORT") 2>/dev/null; then fail "the API server answers on $BRIDGE_IP"; fi
# The kubelet listens on the node's address, which no pod has a route to.
if (exec 3<>"/dev/tcp/$NODE_IP/$KUBELET_PORT") 2>/dev/null; then fail "the kubelet answers a pod on $NODE_IP"; fi
if (exec 3<>"/dev/tcp/$BRIDGE_IP/$KUBELET_PORT") 2>/dev/null; then fail "the kubelet answers a pod on $BRIDGE_IP"; fi
echo "smoke ok"
`

func TestWorkerPodRunsToCompletion(t *testing.T) {
	env := cluster(t)
	_, podNet, err := net.ParseCIDR(env["POD_CIDR"])
	if err != nil {
		t.Fatalf("POD_CIDR: %v", err)
	}
	// /proc/net/route writes an IPv4 destination as little-endian hex.
	ip := podNet.IP.To4()
	podNetHex := strings.ToUpper(hex.EncodeToString([]byte{ip[3], ip[2], ip[1], ip[0]}))

	ns := fmt.Sprintf("smoke-%d", time.Now().UnixNano())
	kubectl(t, env, nil, "create", "namespace", ns)
	t.Cleanup(func() { kubectl(t, env, nil, "delete", "namespace", ns, "--wait=false") })

	// The image comes from Docker (docker save | ctr import): never pulled.
	pod := map[string]any{
		"apiVersion": "v1",
		"kind":       "Pod",
		"metadata":   map[string]any{"name": "worker-base", "namespace": ns},
		"spec": map[string]any{
			"restartPolicy":                "Never",
			"automountServiceAccountToken": false,
			"securityContext":              map[string]any{"runAsNonRoot": true, "runAsUser": 1000},
			"containers": []any{map[string]any{
				"name":            "probe",
				"image":           env["WORKER_BASE_IMAGE"],
				"imagePullPolicy": "Never",
				"command":         []string{"/bin/bash", "-c", probe},
				"env": []any{
					map[string]any{"name": "POD_NET_HEX", "value": podNetHex},
					map[string]any{"name": "BRIDGE_IP", "value": env["BRIDGE_IP"]},
					map[string]any{"name": "NODE_IP", "value": env["NODE_IP"]},
					map[string]any{"name": "KUBELET_PORT", "value": env["KUBELET_PORT"]},
					map[string]any{"name": "APISERVER_PORT", "value": env["APISERVER_PORT"]},
				},
				"securityContext": map[string]any{
					"allowPrivilegeEscalation": false,
					"capabilities":             map[string]any{"drop": []string{"ALL"}},
				},
			}},
		},
	}
	manifest, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	kubectl(t, env, manifest, "apply", "-f", "-")

	var got struct {
		Spec struct {
			Volumes []struct{ Name string }
		}
		Status struct {
			Phase  string
			PodIP  string
			Reason string
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if err := json.Unmarshal(kubectl(t, env, nil, "get", "pod", "worker-base", "-n", ns, "-o", "json"), &got); err != nil {
			t.Fatalf("decode the pod: %v", err)
		}
		if got.Status.Phase == "Succeeded" || got.Status.Phase == "Failed" || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	logs := string(kubectl(t, env, nil, "logs", "worker-base", "-n", ns))
	t.Logf("pod %s/worker-base: %s in %s, ip %s; its output: %s", ns, got.Status.Phase, time.Since(start).Round(time.Millisecond), got.Status.PodIP, strings.TrimSpace(logs))
	if got.Status.Phase != "Succeeded" {
		t.Fatalf("the pod ended %q (%s), want Succeeded", got.Status.Phase, got.Status.Reason)
	}
	if !strings.Contains(logs, "smoke ok") {
		t.Errorf("the probe's output lacks %q", "smoke ok")
	}
	if ip := net.ParseIP(got.Status.PodIP); ip == nil || !podNet.Contains(ip) {
		t.Errorf("pod address %q is not on %s", got.Status.PodIP, podNet)
	}
	for _, v := range got.Spec.Volumes {
		if strings.HasPrefix(v.Name, "kube-api-access") {
			t.Errorf("the pod has the service-account volume %s", v.Name)
		}
	}
}

// TestListenersOnLoopback checks, from the host's socket table, where each
// component listens: loopback only, but the kubelet's API, which is on the
// pod bridge (a node address cannot be loopback).
func TestListenersOnLoopback(t *testing.T) {
	env := cluster(t)
	listeners := listening(t)
	for _, tc := range []struct {
		name, port, want string
	}{
		{"kube-apiserver", env["APISERVER_PORT"], "127.0.0.1"},
		{"etcd client", env["ETCD_PORT"], "127.0.0.1"},
		{"etcd peer", env["ETCD_PEER_PORT"], "127.0.0.1"},
		{"kube-controller-manager", env["CONTROLLER_MANAGER_PORT"], "127.0.0.1"},
		{"kube-scheduler", env["SCHEDULER_PORT"], "127.0.0.1"},
		{"kubelet healthz", env["KUBELET_HEALTHZ_PORT"], "127.0.0.1"},
		{"kubelet", env["KUBELET_PORT"], env["NODE_IP"]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			port, err := strconv.Atoi(tc.port)
			if err != nil {
				t.Fatalf("port %q: %v", tc.port, err)
			}
			addrs := listeners[port]
			if len(addrs) == 0 {
				t.Fatalf("nothing listens on port %d", port)
			}
			for _, a := range addrs {
				if a != tc.want {
					t.Errorf("port %d listens on %s, want only %s", port, a, tc.want)
				}
			}
		})
	}
}

// listening reads /proc/net/tcp and tcp6: the local addresses of the
// sockets in LISTEN state, by port.
func listening(t *testing.T) map[int][]string {
	t.Helper()
	out := map[int][]string{}
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatalf("read %s: %v", file, err)
		}
		for _, line := range strings.Split(string(data), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 4 || f[3] != "0A" { // 0A: TCP_LISTEN
				continue
			}
			addrHex, portHex, _ := strings.Cut(f[1], ":")
			port, err := strconv.ParseInt(portHex, 16, 32)
			if err != nil {
				continue
			}
			out[int(port)] = append(out[int(port)], procAddr(addrHex))
		}
	}
	return out
}

// procAddr turns an address of /proc/net/tcp{,6} (32-bit words in host,
// little-endian, order) into its text form.
func procAddr(h string) string {
	b, err := hex.DecodeString(h)
	if err != nil {
		return h
	}
	for i := 0; i+4 <= len(b); i += 4 {
		b[i], b[i+1], b[i+2], b[i+3] = b[i+3], b[i+2], b[i+1], b[i]
	}
	ip := net.IP(b)
	if v4 := ip.To4(); v4 != nil && len(b) == 16 {
		return "::ffff:" + v4.String()
	}
	return ip.String()
}
