module github.com/agentvisor/agentvisor/protocol

go 1.26
