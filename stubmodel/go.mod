module github.com/agentvisor/agentvisor/stubmodel

go 1.26.0
