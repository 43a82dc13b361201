package spawner

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/agentvisor/agentvisor/envconf"
)

// The engines a worker-manager runs workers on (WORKER_ENGINE).
const (
	EngineDocker     = "docker"
	EngineKubernetes = "kubernetes"
)

// EngineConfig says which engine runs the workers and, for Kubernetes,
// where and how (docs/kubernetes.md). It is read from the environment
// apart from Config, by EngineConfigFromEnv; engineVars is its table.
type EngineConfig struct {
	Engine string // WORKER_ENGINE
	// Kubeconfig (KUBECONFIG) is the cluster's client configuration; ""
	// is the in-cluster configuration of a manager running in a pod.
	Kubeconfig   string
	Namespace    string // K8S_NAMESPACE
	StorageClass string // K8S_STORAGE_CLASS ("": project volumes are emptyDir)
	VolumeSize   string // K8S_VOLUME_SIZE
	LoadImages   string // K8S_LOAD_IMAGES: the containerd sockets the images are imported into, separated by commas
	NodeSelector map[string]string
	// Tolerations (K8S_TOLERATIONS) is a JSON array of Kubernetes
	// tolerations, read by the Kubernetes engine (kubernetes.Tolerations):
	// this package does not link the Kubernetes API's types.
	Tolerations    string
	RuntimeClass   string // K8S_RUNTIME_CLASS
	ServiceAccount string // K8S_SERVICE_ACCOUNT
}

// EngineConfigFromEnv reads EngineConfig; an error names the variable.
func EngineConfigFromEnv(getenv func(string) string) (EngineConfig, error) {
	var c EngineConfig
	if err := envconf.Load(getenv, engineVars(&c)); err != nil {
		return EngineConfig{}, err
	}
	return c, nil
}

// engineVars is EngineConfig's table of variables.
func engineVars(c *EngineConfig) []envconf.Var {
	return []envconf.Var{
		{Name: "WORKER_ENGINE", Default: EngineDocker, Value: envconf.Func(c.setEngine), Doc: "what runs the workers: `docker` (the host's Docker engine, `DOCKER_HOST`) or `kubernetes` (a pod per worker, [docs/kubernetes.md](kubernetes.md))"},
		{Name: "KUBECONFIG", Value: envconf.String(&c.Kubeconfig), Doc: "with `WORKER_ENGINE=kubernetes`: the cluster's kubeconfig file; unset, the in-cluster configuration of a manager that runs in a pod"},
		{Name: "K8S_NAMESPACE", Default: "agentvisor", Value: envconf.String(&c.Namespace), Doc: "the namespace of the workers' pods and volume claims (deploy/kubernetes/base makes `agentvisor`)"},
		{Name: "K8S_STORAGE_CLASS", Value: envconf.String(&c.StorageClass), Doc: "a project volume is a PersistentVolumeClaim of this storage class (ReadWriteOnce); unset, it is the pod's own `emptyDir`, gone with the pod (a long-lived worker's sessions go on through the session store)"},
		{Name: "K8S_VOLUME_SIZE", Default: "1Gi", Value: envconf.String(&c.VolumeSize), Doc: "the size a project volume's claim asks for"},
		{Name: "K8S_LOAD_IMAGES", Value: envconf.String(&c.LoadImages), Doc: "a node's containerd socket, or several separated by commas: each worker image is imported into each from the manager's Docker engine before its first pod (`docker save`, `ctr import`; the pods' pull policy is then `Never`), for a cluster with no registry such as `make k8s`'s; unset, the nodes pull the image (`IfNotPresent`)"},
		{Name: "K8S_NODE_SELECTOR", Value: envconf.Func(c.setNodeSelector), Doc: "the workers' node selector: `key=value` pairs separated by commas"},
		{Name: "K8S_TOLERATIONS", Value: envconf.Func(c.setTolerations), Doc: "the workers' tolerations: a JSON array of Kubernetes tolerations (`[{\"key\":\"agents\",\"operator\":\"Exists\",\"effect\":\"NoSchedule\"}]`)"},
		{Name: "K8S_RUNTIME_CLASS", Value: envconf.String(&c.RuntimeClass), Doc: "the workers' RuntimeClass (`gvisor`, `kata`: one the cluster defines)"},
		{Name: "K8S_SERVICE_ACCOUNT", Value: envconf.String(&c.ServiceAccount), Doc: "the service account the workers' pods run as (default: the namespace's `default`); its token is never mounted"},
	}
}

func (c *EngineConfig) setEngine(s string) error {
	switch s {
	case EngineDocker, EngineKubernetes:
		c.Engine = s
		return nil
	}
	return fmt.Errorf("%q: docker or kubernetes", s)
}

func (c *EngineConfig) setNodeSelector(s string) error {
	if s == "" {
		return nil
	}
	c.NodeSelector = map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || k == "" {
			return fmt.Errorf("%q: key=value pairs separated by commas", s)
		}
		c.NodeSelector[k] = v
	}
	return nil
}

func (c *EngineConfig) setTolerations(s string) error {
	if s == "" {
		return nil
	}
	var objects []map[string]any
	if err := json.Unmarshal([]byte(s), &objects); err != nil {
		return fmt.Errorf("a JSON array of tolerations: %w", err)
	}
	c.Tolerations = s
	return nil
}
