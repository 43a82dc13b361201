module github.com/agentvisor/agentvisor/wrapper

go 1.26

require github.com/agentvisor/agentvisor/protocol v0.0.0

replace github.com/agentvisor/agentvisor/protocol => ../protocol
