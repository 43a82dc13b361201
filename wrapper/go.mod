module github.com/agentvisor/agentvisor/wrapper

go 1.26

replace github.com/agentvisor/agentvisor/protocol => ../protocol
