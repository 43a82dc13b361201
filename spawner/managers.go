package spawner

import (
	"context"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/internal/ctlplane"
	"github.com/agentvisor/agentvisor/spawner/internal/rdb"
)

// ManagerState is what a worker-manager says about itself in Redis
// (ctlplane.ManagerState).
type ManagerState = ctlplane.ManagerState

// Presence refreshes this manager's state hash every third of its TTL,
// on every manager, and deletes it when stopped: a manager that stops
// cleanly leaves the list at once, one that dies when its hash expires.
type Presence struct {
	job
	*env
	leases    leases
	managerID string
	obs       *observer
	started   time.Time // set by Start, read by the loop
}

func newPresence(e *env, l leases, managerID string, obs *observer) *Presence {
	return &Presence{env: e, leases: l, managerID: managerID, obs: obs}
}

// Start refreshes until Stop.
func (p *Presence) Start(ctx context.Context) {
	p.started = time.Now()
	p.start(ctx, p.run)
}

func (p *Presence) run(ctx context.Context) {
	ttl := ctlplane.ManagerStateTTLSeconds * time.Second
	host := p.Host()
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		// Only our own hash: a manager restarted under the same id has
		// already written its own instance.
		_ = p.rdb.LeaveManager(dctx, p.managerID, p.leases.instance)
	}()
	every(ctx, ttl/3, func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		var leases []string
		for _, name := range []string{ctlplane.LeaderLease, ctlplane.HostLeaderLease(p.Host())} {
			if holder, err := p.rdb.LeaseHolder(ctx, name); err == nil && holder == p.leases.instance {
				leases = append(leases, name)
			}
		}
		p.obs.setLeases(leases)
		last := ""
		if ms := p.obs.lastReconcile.Load(); ms > 0 {
			last = protocol.FormatTime(time.UnixMilli(ms))
		}
		fields := map[string]any{
			ctlplane.ManagerFieldID: p.managerID, ctlplane.ManagerFieldInstance: p.leases.instance,
			ctlplane.ManagerFieldHost: host, ctlplane.ManagerFieldPID: os.Getpid(), ctlplane.ManagerFieldVersion: Version(),
			ctlplane.ManagerFieldStartedAt: protocol.FormatTime(p.started), ctlplane.ManagerFieldUpdatedAt: protocol.FormatTime(time.Now()),
			ctlplane.ManagerFieldLastReconcileAt: last, ctlplane.ManagerFieldLeases: strings.Join(leases, ","),
			ctlplane.ManagerFieldMetricsAddr: p.obs.addr,
		}
		if err := p.rdb.RenewManager(ctx, p.managerID, fields, ttl); err != nil && ctx.Err() == nil {
			p.log.Warn("manager state not refreshed", "err", err)
		}
	})
}

// ListManagers reads the state of every manager of the key prefix,
// sorted by id; members whose state expired are dropped from the set.
func ListManagers(ctx context.Context, rc redis.Cmdable, keys protocol.Keys) ([]ManagerState, error) {
	out, err := rdb.New(rc, keys).ListManagers(ctx)
	if err != nil {
		return nil, redisError(err, "list managers")
	}
	return out, nil
}

// Version is the running build's version: its module version, or its
// VCS revision, or "devel".
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" {
			return fmt.Sprintf("devel-%.12s", s.Value)
		}
	}
	return "devel"
}
