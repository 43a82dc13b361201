package kubernetes

import (
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Dial returns a client of the cluster of a kubeconfig file, or, with
// "", of the cluster a manager's pod runs in (its service account).
func Dial(kubeconfig string) (clientset.Interface, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig == "" {
		cfg, err = rest.InClusterConfig()
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes: client configuration: %w", err)
	}
	cfg.UserAgent = "agentvisor-worker-manager"
	// The informer's one watch and a create's few calls: client-go's
	// default of 5 requests a second would queue a burst of creates.
	cfg.QPS, cfg.Burst = 50, 100
	return clientset.NewForConfig(cfg)
}

// Tolerations reads a JSON array of Kubernetes tolerations (K8S_TOLERATIONS);
// "" is none.
func Tolerations(s string) ([]corev1.Toleration, error) {
	if s == "" {
		return nil, nil
	}
	var t []corev1.Toleration
	if err := json.Unmarshal([]byte(s), &t); err != nil {
		return nil, fmt.Errorf("K8S_TOLERATIONS: a JSON array of tolerations: %w", err)
	}
	return t, nil
}
