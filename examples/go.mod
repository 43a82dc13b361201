module github.com/agentvisor/agentvisor/examples

go 1.26.0

require (
	github.com/agentvisor/agentvisor/client v0.0.0
	github.com/agentvisor/agentvisor/gateway v0.0.0
	github.com/agentvisor/agentvisor/protocol v0.0.0
	github.com/agentvisor/agentvisor/redisconn v0.0.0
	github.com/agentvisor/agentvisor/spawner v0.0.0
	github.com/agentvisor/agentvisor/stubmodel v0.0.0
	github.com/docker/docker v28.5.2+incompatible
	github.com/redis/go-redis/v9 v9.23.0
)

require (
	github.com/Azure/go-ansiterm v0.0.0-20250102033503-faa5f7b0171c // indirect
	github.com/Microsoft/go-winio v0.6.4 // indirect
	github.com/agentvisor/agentvisor/envconf v0.0.0 // indirect
	github.com/agentvisor/agentvisor/testkit v0.0.0
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cenkalti/backoff/v5 v5.0.3 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/containerd/errdefs v1.0.0 // indirect
	github.com/containerd/errdefs/pkg v0.3.0 // indirect
	github.com/distribution/reference v0.6.0 // indirect
	github.com/docker/go-connections v0.8.2 // indirect
	github.com/docker/go-units v0.5.0 // indirect
	github.com/felixge/httpsnoop v1.1.0 // indirect
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/moby/docker-image-spec v1.3.1 // indirect
	github.com/moby/sys/sequential v0.7.0 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/prometheus/client_golang v1.25.0 // indirect
	github.com/prometheus/client_model v0.6.3 // indirect
	github.com/prometheus/common v0.72.0 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	github.com/tidwall/gjson v1.20.0 // indirect
	github.com/tidwall/match v1.1.1 // indirect
	github.com/tidwall/pretty v1.2.0 // indirect
	go.opentelemetry.io/auto/sdk v1.2.1 // indirect
	go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp v0.72.0 // indirect
	go.opentelemetry.io/otel v1.47.0 // indirect
	go.opentelemetry.io/otel/exporters/otlp/otlptrace v1.47.0 // indirect
	go.opentelemetry.io/otel/log v1.47.0 // indirect
	go.opentelemetry.io/otel/metric v1.47.0 // indirect
	go.opentelemetry.io/otel/trace v1.47.0 // indirect
	go.opentelemetry.io/proto/otlp v1.11.1 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

replace (
	github.com/agentvisor/agentvisor/client => ../client
	github.com/agentvisor/agentvisor/envconf => ../envconf
	github.com/agentvisor/agentvisor/protocol => ../protocol
	github.com/agentvisor/agentvisor/redisconn => ../redisconn
	github.com/agentvisor/agentvisor/spawner => ../spawner
	github.com/agentvisor/agentvisor/stubmodel => ../stubmodel
)

replace github.com/agentvisor/agentvisor/testkit => ../testkit

replace github.com/agentvisor/agentvisor/gateway => ../gateway
