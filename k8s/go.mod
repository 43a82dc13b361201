module github.com/agentvisor/agentvisor/k8s

go 1.26.0

require (
	github.com/agentvisor/agentvisor/client v0.0.0
	github.com/agentvisor/agentvisor/protocol v0.0.0
	github.com/agentvisor/agentvisor/testkit v0.0.0
	github.com/redis/go-redis/v9 v9.23.0
)

require (
	github.com/agentvisor/agentvisor/redisconn v0.0.0 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)

replace github.com/agentvisor/agentvisor/client => ../client

replace github.com/agentvisor/agentvisor/protocol => ../protocol

replace github.com/agentvisor/agentvisor/redisconn => ../redisconn

replace github.com/agentvisor/agentvisor/testkit => ../testkit

replace github.com/agentvisor/agentvisor/envconf => ../envconf
