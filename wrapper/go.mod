module github.com/agentvisor/agentvisor/wrapper

go 1.26

replace github.com/agentvisor/agentvisor/protocol => ../protocol

require (
	github.com/agentvisor/agentvisor/protocol v0.0.0-00010101000000-000000000000
	github.com/creack/pty v1.1.24
	github.com/tidwall/gjson v1.20.0
)

require (
	github.com/tidwall/match v1.1.1 // indirect
	github.com/tidwall/pretty v1.2.0 // indirect
)
