package spawner

import (
	"context"
	"log/slog"
	"time"

	"github.com/agentvisor/agentvisor/spawner/images"

	dockerengine "github.com/agentvisor/agentvisor/spawner/engine/docker"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/spawner/internal/ctlplane"
)

// NewDocker returns a Spawner over a Docker engine: the engine of the
// configuration's key prefix, keeping spare network namespaces for sealed
// workers (SPARE_NETNS), marked in this Spawner's Redis.
func NewDocker(cfg Config, dc dockerengine.Client, rc redis.UniversalClient, builder *images.Builder, log *slog.Logger) *Spawner {
	if log == nil {
		log = slog.Default()
	}
	eng := dockerengine.New(dc, cfg.Keys.Prefix, log)
	s := New(cfg, eng, rc, builder, log)
	eng.KeepDisks(dockerengine.Disks{Dir: s.cfg.DiskDir})
	if s.seals.enabled() {
		image := func() string { return s.cfg.BaseImage }
		if builder != nil {
			image = func() string { return builder.BaseImage }
		}
		eng.KeepSpares(dockerengine.Spares{Count: s.cfg.SpareNetns, Image: image, ManagerID: s.cfg.ManagerID, Host: s.Host,
			MarkTTL: s.cfg.LeaseTTL, Marks: s.rdb})
	}
	return s
}

// parts builds the components of a manager from its Spawner: the one
// place that says what each component is given. A component gets the
// shared env, the settings it reads and the few Spawner operations it
// calls (through a narrow interface or a function), never the Spawner.
type parts struct{ s *Spawner }

func (p parts) leases() leases {
	return leases{store: p.s.rdb, instance: p.s.instance, ttl: p.s.cfg.LeaseTTL}
}

func (p parts) consumer() consumer {
	return consumer{e: p.s.env, managerID: p.s.cfg.ManagerID, leaseTTL: p.s.cfg.LeaseTTL}
}

func (p parts) commands(maxInFlight int) *Commands {
	c := p.s.cfg
	return newCommands(commandsParams{env: p.s.env, consumer: p.consumer(), workers: p.s, resume: p.s.hib.resume, maxInFlight: maxInFlight,
		stopTimeout: c.StopTimeout, timeout: c.CreationTimeout + c.StopTimeout + 5*time.Minute,
		deadlines: deadlines{now: p.s.now, log: p.s.log, obs: &p.s.obs, delete: p.s.Delete}})
}

func (p parts) controls() *Controls {
	return newControls(controlsParams{env: p.s.env, consumer: p.consumer(), pause: p.s.Pause})
}

func (p parts) crashes() *Crashes {
	return newCrashes(crashesParams{env: p.s.env, engine: p.s.engine, workers: p.s.ret})
}

func (p parts) health() *Health {
	return newHealth(healthParams{env: p.s.env, workers: p.s.ret, interval: p.s.cfg.HeartbeatInterval, stopTimeout: p.s.cfg.StopTimeout,
		replaceDegradedAfter: p.s.cfg.ReplaceDegradedAfter, obs: &p.s.obs, restoreUsers: p.s.users.restore, connected: p.s.connected})
}

func (p parts) wake() *Wake {
	hibernated := func(ctx context.Context) ([]string, error) { return p.s.rdb.HibernatedOn(ctx, p.s.Host()) }
	return newWake(wakeParams{env: p.s.env, unpause: p.s.Unpause, hibernated: hibernated, resume: p.s.hib.wakeHibernated, obs: &p.s.obs})
}

func (p parts) timeouts() *Timeouts {
	c := p.s.cfg
	hibernate := func(ctx context.Context, id, reason string) error { return p.s.hib.hibernate(ctx, id, reason, false) }
	return newTimeouts(timeoutsParams{env: p.s.env, workers: p.s.ret, pause: p.s.Pause, hibernateWorker: hibernate,
		interval: max(c.HeartbeatInterval/4, 100*time.Millisecond), idle: c.IdleTimeout, paused: c.PauseTimeout,
		hibernateAfter: c.HibernateAfter, poolIdle: poolIdle(c.Pools), noFreeze: !p.s.suspends()})
}

func (p parts) reconciler() *Reconciler {
	c := p.s.cfg
	return newReconciler(reconcilerParams{env: p.s.env, engine: p.s.engine, workers: p.s.ret, users: p.s.users, obs: &p.s.obs,
		creationGrace: c.CreationGrace, interval: c.ReconcileInterval, leaseTTL: c.LeaseTTL})
}

func (p parts) volumeGC() *VolumeGC { return &VolumeGC{volumes: p.s.volumes} }

func (p parts) imageGC(gc *images.GC) *gcJob { return &gcJob{gc: gc, obs: &p.s.obs} }

func (p parts) retention() *Retention { return newRetention(p.s.env) }

func (p parts) gone() *Gone {
	return newGone(p.s.env, p.s.answers, max(p.s.cfg.HeartbeatInterval/2, 100*time.Millisecond), p.s.cfg.Retention)
}

func (p parts) pools() *Pools { return newPools(p.s.env, p.s.cfg.Pools, p.s) }

func (p parts) presence() *Presence {
	return newPresence(p.s.env, p.leases(), p.s.cfg.ManagerID, &p.s.obs)
}

func (p parts) hostPresence() *HostPresence {
	hp := hostPresenceParams{env: p.s.env, ttl: p.s.cfg.HostTTL, maxWorkers: p.s.cfg.MaxWorkers, labels: p.s.cfg.HostLabels}
	if p.s.engine != nil {
		hp.info = p.s.engine.Info
	}
	return newHostPresence(hp)
}

func (p parts) hostWatch() *HostWatch {
	return newHostWatch(hostWatchParams{env: p.s.env, workers: p.s.ret, leases: p.leases(), hostTTL: p.s.cfg.HostTTL, heartbeat: p.s.cfg.HeartbeatInterval})
}

// hostLeader runs the components that act on this host's engine, under
// the host's leader lease.
func (p parts) hostLeader(gc *images.GC) *Leader {
	jobs := []component{p.health(), p.wake(), p.timeouts(), p.reconciler(), p.volumeGC()}
	if gc != nil {
		jobs = append(jobs, p.imageGC(gc))
	}
	return newLeader(p.s.env, p.leases(), ctlplane.HostLeaderLease(p.s.Host()), jobs)
}

// fleetLeader runs the components that run once per key prefix, under
// the fleet's leader lease: retention, warm pools, the answers to tasks
// sent to retired workers, the metrics read from the streams.
func (p parts) fleetLeader() *Leader {
	jobs := []component{p.retention(), p.pools(), p.gone()}
	jobs = append(jobs, p.s.obs.leaderJobs(p.s.env)...)
	return newLeader(p.s.env, p.leases(), ctlplane.LeaderLease, jobs)
}

// poolIdle is every pool's idle_timeout (those that set one).
func poolIdle(pools []PoolTemplate) map[string]time.Duration {
	m := map[string]time.Duration{}
	for _, p := range pools {
		if p.IdleTimeout > 0 {
			m[p.Name] = p.IdleTimeout
		}
	}
	return m
}
