// Package k8s holds what the local test cluster of `make k8s` needs from
// Go: the sandbox ("pause") program of its pods, in cmd/k8s-pause, the
// cluster's smoke test, and the tests and benchmark of worker-manager on
// the cluster with WORKER_ENGINE=kubernetes (`make test-k8s`, `make
// bench`). The cluster itself is started and removed by scripts/k8s.sh;
// see docs/kubernetes.md.
package k8s
