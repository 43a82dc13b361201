module github.com/agentvisor/agentvisor/envconf

go 1.26
