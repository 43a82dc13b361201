package spawner

import (
	"context"
	"fmt"

	"golang.org/x/sync/errgroup"

	"github.com/agentvisor/agentvisor/protocol"
)

// Manager is the worker-manager service over a Spawner. Several managers
// may share one Redis and key prefix: each executes the commands and
// control requests it reads through the managers group (and claims those
// a dead manager left), follows its engine's events, and the one holding
// the leader lease runs what must run once.
//
// Components (one file each): Commands, Controls and Crashes on every
// manager; under the Leader: Health, Wake, Timeouts, Reconciler and the
// image GC.
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
	for _, stream := range []string{s.keys.Commands(), s.keys.Control()} {
		if err := s.rdb.EnsureGroup(ctx, stream, protocol.ManagerGroup); err != nil {
			return fmt.Errorf("spawner: create group on %s: %w", stream, err)
		}
	}
	leaderJobs := []component{&Health{s: s}, &Wake{s: s}, &Timeouts{s: s}, &Reconciler{s: s}, &Retention{s: s}, &VolumeGC{s: s}, &Pools{s: s}}
	if m.GC != nil {
		leaderJobs = append(leaderJobs, &gcJob{gc: m.GC, s: s})
	}
	leaderJobs = append(leaderJobs, s.obs.leaderJobs(s)...) // metrics from the streams (metrics.go)
	commands := newCommands(s, m.MaxInFlight)
	controls := &Controls{s: s}
	crashes := &Crashes{s: s}
	leader := &Leader{s: s, jobs: leaderJobs}
	// Each component's loop gets a context that Run cancels only through
	// its Stop, in the order above.
	base := context.WithoutCancel(ctx)
	presence := &Presence{s: s}
	presence.Start(base)
	defer presence.Stop()
	for _, c := range []component{crashes, leader, controls, commands} {
		c.Start(base)
	}
	<-ctx.Done()
	for _, c := range []component{commands, controls, leader, crashes} {
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

// Shutdown retires every worker of this key prefix, in parallel: the
// manager, stopping, leaves no container behind. Every worker is tried;
// the first error is returned.
func (s *Spawner) Shutdown(ctx context.Context) error {
	ws, err := s.List(ctx)
	if err != nil {
		return err
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
