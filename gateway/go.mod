module github.com/agentvisor/agentvisor/gateway

go 1.26.0

require (
	github.com/agentvisor/agentvisor/envconf v0.0.0
	github.com/agentvisor/agentvisor/testkit v0.0.0
)

replace github.com/agentvisor/agentvisor/envconf => ../envconf

replace github.com/agentvisor/agentvisor/protocol => ../protocol

replace github.com/agentvisor/agentvisor/testkit => ../testkit
