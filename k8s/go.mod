module github.com/agentvisor/agentvisor/k8s

go 1.26
