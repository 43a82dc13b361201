module github.com/agentvisor/agentvisor/wrapper

go 1.26.0

replace (
	github.com/agentvisor/agentvisor/envconf => ../envconf
	github.com/agentvisor/agentvisor/protocol => ../protocol
	github.com/agentvisor/agentvisor/redisconn => ../redisconn
	github.com/agentvisor/agentvisor/stubmodel => ../stubmodel
)

require (
	github.com/agentvisor/agentvisor/envconf v0.0.0
	github.com/agentvisor/agentvisor/gateway v0.0.0
	github.com/agentvisor/agentvisor/protocol v0.0.0
	github.com/agentvisor/agentvisor/redisconn v0.0.0
	github.com/agentvisor/agentvisor/stubmodel v0.0.0
	github.com/cenkalti/backoff/v5 v5.0.3
	github.com/creack/pty v1.1.24
	github.com/redis/go-redis/v9 v9.23.0
	github.com/tidwall/gjson v1.20.0
	golang.org/x/sys v0.48.0
)

require (
	github.com/agentvisor/agentvisor/testkit v0.0.0
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/tidwall/match v1.1.1 // indirect
	github.com/tidwall/pretty v1.2.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
)

replace github.com/agentvisor/agentvisor/testkit => ../testkit

replace github.com/agentvisor/agentvisor/gateway => ../gateway
