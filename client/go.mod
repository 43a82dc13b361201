module github.com/agentvisor/agentvisor/client

go 1.26.0

require (
	github.com/agentvisor/agentvisor/protocol v0.0.0
	github.com/agentvisor/agentvisor/redisconn v0.0.0
	github.com/redis/go-redis/v9 v9.23.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)

replace github.com/agentvisor/agentvisor/protocol => ../protocol

replace github.com/agentvisor/agentvisor/redisconn => ../redisconn
