package spawner

import (
	"context"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/gateway"
	"github.com/agentvisor/agentvisor/gateway/gatewaytest"
	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/testkit"
)

// BenchmarkSealedCreate: create → the wrapper's started event of a sealed
// worker (its gateway's sockets opened first, a spare network namespace
// joined, Redis through the sockets) against the same with host
// networking, alternating, in the same run. The gateway runs in the
// benchmark's process (worker-gateway is a process of its own).
func BenchmarkSealedCreate(b *testing.B) {
	dir := gatewaytest.Dir(b)
	sealed := newFixture(b, func(c *Config) { c.NetworkMode, c.GatewayDir = NetworkSealed, dir })
	host := newFixture(b, func(c *Config) { c.NetworkMode = "host" })
	gatewaytest.Start(b, gateway.Config{Dir: dir, Redis: sealed.rc.Options().Addr, Model: sealed.stub.URL})
	ctx := context.Background()
	spec := protocol.WorkerSpec{AgentType: protocol.AgentClaude}
	startOf := func(f *fixture) float64 {
		// The engine at rest before each create, sealed or not: the
		// spare namespaces made and the last sealed worker's holder gone
		// (a manager does that while it waits for work).
		testkit.Eventually(b, "the spare namespaces", time.Minute, sealed.s.dockerEngine().SparesSettled)
		info, ms := f.timedCreate(b, spec)
		if err := f.s.Delete(ctx, info.WorkerID); err != nil {
			b.Fatal(err)
		}
		return ms
	}
	sealed.s.engine.Prepare() // as a manager does at its start
	startOf(sealed)           // images built, caches warm
	startOf(host)
	var s, h []float64
	for i := 0; i < 15; i++ { // a median of 5 moved by 15 % between runs
		s = append(s, startOf(sealed))
		h = append(h, startOf(host))
	}
	b.ReportMetric(median(s), "sealed-create-to-started-median-ms")
	b.ReportMetric(median(h), "host-create-to-started-median-ms")
	b.ReportMetric(median(s)/median(h), "sealed-create-ratio")
}

// timedCreate creates a worker of spec and returns it and the
// milliseconds from the create to its wrapper's started event.
func (f *fixture) timedCreate(b *testing.B, spec protocol.WorkerSpec) (protocol.WorkerInfo, float64) {
	b.Helper()
	from := lastID(f.rc, f.keys.Lifecycle())
	t0 := time.Now()
	info, err := f.s.Create(context.Background(), spec)
	if err != nil {
		b.Fatal(err)
	}
	at := f.waitEvent(b, from, info.WorkerID, protocol.EventStarted, time.Minute)
	return info, float64(at.Sub(t0).Milliseconds())
}
