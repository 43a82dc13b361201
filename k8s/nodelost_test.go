package k8s_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/testkit"
)

// node2Env is where `scripts/k8s.sh node2 up` writes the second node's
// settings.
const node2Env = "/run/agentvisor-k8s/node2.env"

// k8sScript runs scripts/k8s.sh with args.
func k8sScript(t testing.TB, args ...string) {
	t.Helper()
	cmd := exec.Command("bash", append([]string{filepath.Join(testkit.Root(), "scripts", "k8s.sh")}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("k8s.sh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// startNode2 starts the cluster's second node on this machine (its own
// kubelet and containerd) and returns its settings; the test's end
// removes it.
func startNode2(t testing.TB) map[string]string {
	t.Helper()
	k8sScript(t, "node2", "up")
	t.Cleanup(func() { k8sScript(t, "node2", "down") })
	f, err := os.Open(node2Env)
	if err != nil {
		t.Fatalf("node 2's settings: %v", err)
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			env[k] = v
		}
	}
	return env
}

// nodeReady reports a node's Ready condition ("True", "False", "Unknown").
func nodeReady(t testing.TB, env map[string]string, name string) string {
	var node struct {
		Status struct {
			Conditions []struct{ Type, Status string }
		}
	}
	if err := json.Unmarshal(kubectl(t, env, nil, "get", "node", name, "-o", "json"), &node); err != nil {
		t.Fatalf("decode node %s: %v", name, err)
	}
	for _, c := range node.Status.Conditions {
		if c.Type == "Ready" {
			return c.Status
		}
	}
	return ""
}

// A node lost in the middle of a task: a busy worker's pod on node 2 (a
// second kubelet and containerd on this machine), whose kubelet,
// containerd and every process of its pods are SIGKILLed, as a machine
// is lost. The task is answered once (failed), the worker lives on, on
// node 1, and serves its next task; once node 2 is removed, no pod,
// claim or key of it is left.
func TestNodeLost(t *testing.T) {
	env := cluster(t)
	node2 := startNode2(t)
	d := deployWith(t, false, map[string]string{"K8S_LOAD_IMAGES": env["CONTAINERD_SOCK"] + "," + node2["NODE2_CONTAINERD_SOCK"]})
	fc := d.faultCase("k8s: node lost mid-task",
		"A busy long-lived worker's pod runs on a second node (its own kubelet and containerd on this machine); that node's kubelet, containerd, shims and every process of its pods are SIGKILLed, as a machine lost; the node is removed at the end (`k8s.sh node2 down`).",
		"the worker serves its next task on the other node (bound 4 min).",
		"from the kill to the task's failed Output.")

	// Node 1 cordoned for the create: the worker's pod goes to node 2.
	kubectl(t, env, nil, "cordon", env["NODE_NAME"])
	uncordon := func() { kubectl(t, env, nil, "uncordon", env["NODE_NAME"]) }
	t.Cleanup(uncordon)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	id, sent := d.busyWorker(ctx, "fake:sleep-120000", func(a answer) bool { return !a.ok })
	if ps := d.pods(); len(ps) != 1 || ps[0].Spec.NodeName != node2["NODE2_NAME"] {
		t.Fatalf("the worker's pod is not on node 2: %+v", ps)
	}
	uncordon()

	fc.Inject()
	lost := time.Now()
	k8sScript(t, "node2", "kill")
	out, err := d.tasks.Await(ctx, sent, nil)
	if err != nil {
		t.Fatalf("the task on the lost node was not answered: %v", err)
	}
	fc.Detected()
	if out.Status == protocol.StatusComplete {
		t.Fatalf("a task whose node was lost completed: %+v", out)
	}
	t.Logf("answered %s %s after %s: %s", out.Status, out.Error.Code, time.Since(lost).Round(time.Second), out.Error.Message)
	fc.Note("the task answered %s %s", out.Status, out.Error.Code)

	if out := d.run(id, "after the node's loss", 4*time.Minute); out.Status != protocol.StatusComplete {
		t.Fatalf("the next task of the worker whose node was lost: %+v", out)
	}
	fc.Recovered()
	fc.Note("served by its incarnation %s", d.status(id)[protocol.StatusFieldIncarnation])
	ps := d.pods()
	if len(ps) != 1 || ps[0].Spec.NodeName != env["NODE_NAME"] {
		t.Errorf("pods after the node's loss: %+v", ps)
	}

	// The node controller marks the node NotReady (Unknown) once its
	// grace has passed (the controller-manager's default, 50 s).
	for deadline := lost.Add(3 * time.Minute); nodeReady(t, env, node2["NODE2_NAME"]) == "True"; time.Sleep(time.Second) {
		if time.Now().After(deadline) {
			t.Fatalf("node 2 still Ready %s after its kubelet was killed", time.Since(lost).Round(time.Second))
		}
	}
	t.Logf("node 2 NotReady %s after the kill", time.Since(lost).Round(time.Second))
	fc.Note("node 2 NotReady after %s", time.Since(lost).Round(time.Second))

	// Removed, the node takes its pods with it (the pod garbage
	// collector's): none is left bound to it.
	k8sScript(t, "node2", "down")
	d.waitPods("no pod on the removed node", 2*time.Minute, func(ps []pod) bool {
		for _, p := range ps {
			if p.Spec.NodeName == node2["NODE2_NAME"] {
				return false
			}
		}
		return true
	})
}
