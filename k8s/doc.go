// Package k8s holds what the local test cluster of `make k8s` needs from
// Go: the sandbox ("pause") program of its pods, in cmd/k8s-pause, and the
// cluster's smoke test (`make test-k8s`). The cluster itself is started and
// removed by scripts/k8s.sh; see docs/kubernetes.md.
package k8s
