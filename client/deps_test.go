package client

import (
	"os/exec"
	"strings"
	"testing"
)

// allowedDeps are the module path prefixes a consumer compiles when it
// imports this package: the standard library aside, the protocol, the
// Redis URL helpers and go-redis with its own dependencies.
var allowedDeps = []string{
	"github.com/agentvisor/agentvisor/client",
	"github.com/agentvisor/agentvisor/protocol",
	"github.com/agentvisor/agentvisor/redisconn",
	"github.com/redis/go-redis/v9",
	"github.com/cespare/xxhash/v2",
	"github.com/dgryski/go-rendezvous",
	"go.uber.org/atomic",
	"golang.org/x/sys",
}

// A service that imports the client must not compile the manager, the
// Docker SDK or Prometheus: the list of what the package depends on
// (outside the standard library) holds only allowedDeps.
func TestClientDependsOnProtocolAndGoRedisOnly(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	if bad := foreignDeps(strings.Fields(string(out))); len(bad) > 0 {
		t.Fatalf("the client package depends on %v: a consumer would compile them", bad)
	}
}

func foreignDeps(deps []string) []string {
	var bad []string
	for _, d := range deps {
		ok := false
		for _, a := range allowedDeps {
			if d == a || strings.HasPrefix(d, a+"/") {
				ok = true
				break
			}
		}
		if !ok {
			bad = append(bad, d)
		}
	}
	return bad
}

func TestForeignDeps(t *testing.T) {
	got := foreignDeps([]string{"github.com/redis/go-redis/v9/internal/pool", "github.com/docker/docker/client",
		"github.com/prometheus/client_golang/prometheus", "github.com/agentvisor/agentvisor/spawner", "github.com/agentvisor/agentvisor/protocol"})
	if strings.Join(got, " ") != "github.com/docker/docker/client github.com/prometheus/client_golang/prometheus github.com/agentvisor/agentvisor/spawner" {
		t.Fatalf("foreignDeps = %v", got)
	}
}
