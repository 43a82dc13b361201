package spawner

import (
	"context"
	"fmt"

	"golang.org/x/sync/errgroup"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/internal/ctlplane"
)

// Manager is the worker-manager service over a Spawner. Several managers
// may share one Redis and key prefix: each executes the commands and
// control requests it reads through the managers group (and claims those
// a dead manager left), follows its engine's events, and the one holding
// the leader lease runs what must run once.
//
// Components (one file each): Commands, Controls, Crashes, HostPresence
// and HostWatch on every manager; under the host's leader lease: Health,
// Wake, Timeouts, Reconciler, VolumeGC and the image GC; under the
// fleet's: Retention, Pools and the metrics read from the streams.
type Manager struct {
	S *Spawner
	// MaxInFlight bounds the commands executed at once (a create may wait
	// for a slot for minutes).
	MaxInFlight int
	// GC, when set, collects stale worker images on the leader.
	GC *ImageGC
}

// Run serves until ctx ends, then stops in this order: stop reading
// commands and controls (queued creates answer SHUTTING_DOWN at once,
// commands in flight finish and are answered), step down as leader
// (releasing the lease for another manager), stop following events. The
// caller decides whether to Shutdown the workers.
func (m *Manager) Run(ctx context.Context) error {
	s := m.S
	me := s.Host()
	for _, stream := range []string{s.keys.Commands(), s.keys.Control(), s.keys.HostCommands(me), s.keys.HostControl(me)} {
		if err := s.rdb.EnsureGroup(ctx, stream, protocol.ManagerGroup); err != nil {
			return fmt.Errorf("spawner: create group on %s: %w", stream, err)
		}
	}
	hostJobs := []component{&Health{s: s}, &Wake{s: s}, &Timeouts{s: s}, &Reconciler{s: s}, &VolumeGC{s: s}}
	if m.GC != nil {
		hostJobs = append(hostJobs, &gcJob{gc: m.GC, s: s})
	}
	fleetJobs := []component{&Retention{s: s}, &Pools{s: s}}
	fleetJobs = append(fleetJobs, s.obs.leaderJobs(s)...) // metrics from the streams (metrics.go)
	commands := newCommands(s, m.MaxInFlight)
	controls := &Controls{s: s}
	crashes := &Crashes{s: s}
	hostLeader := &Leader{s: s, lease: ctlplane.HostLeaderLease(me), jobs: hostJobs}
	leader := &Leader{s: s, lease: ctlplane.LeaderLease, jobs: fleetJobs}
	// A host that comes back settles its engine before it takes creates:
	// the containers of workers retired while it was lost go first.
	if _, err := s.Reconcile(ctx); err != nil {
		s.log.Warn("reconcile before joining the fleet", "err", err)
	}
	// Each component's loop gets a context that Run cancels only through
	// its Stop, in the order above.
	base := context.WithoutCancel(ctx)
	presence := &Presence{s: s}
	presence.Start(base)
	defer presence.Stop()
	hosts := &HostPresence{s: s}
	hosts.Start(base)
	defer hosts.Stop()
	watch := &HostWatch{s: s}
	for _, c := range []component{crashes, hostLeader, leader, watch, controls, commands} {
		c.Start(base)
	}
	<-ctx.Done()
	for _, c := range []component{commands, controls, watch, leader, hostLeader, crashes} {
		c.Stop()
	}
	return nil
}

// gcJob runs the image GC as a component.
type gcJob struct {
	job
	gc *ImageGC
	s  *Spawner
}

func (g *gcJob) Start(ctx context.Context) { g.start(ctx, g.run) }

// Shutdown retires every worker of this key prefix on this host, in
// parallel: the manager, stopping, leaves no container behind. Every
// worker is tried; the first error is returned.
func (s *Spawner) Shutdown(ctx context.Context) error {
	all, err := s.List(ctx)
	if err != nil {
		return err
	}
	var ws []protocol.WorkerInfo
	for _, w := range all {
		if s.mine(w.Host) {
			ws = append(ws, w)
		}
	}
	var g errgroup.Group
	g.SetLimit(32)
	for _, w := range ws {
		g.Go(func() error {
			if err := s.Delete(ctx, w.WorkerID); err != nil && !IsNotFound(err) {
				return err
			}
			return nil
		})
	}
	return g.Wait()
}
