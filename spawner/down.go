package spawner

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/engine"
	"github.com/agentvisor/agentvisor/spawner/internal/rdb"
)

// Down takes a key prefix off a host when its manager is gone (a manager
// that stops hibernates or removes its workers itself, unless
// KEEP_WORKERS): every
// container of the prefix on this engine (the workers' and their network
// namespaces' holders) and its project volumes, the
// prefix's per-worker Redis users, and the socket directories the
// host's worker-gateway keeps for those workers. PlanDown lists them and
// changes nothing; Execute removes them. Nothing else of Redis is
// touched: a manager started later finds the workers gone and retires
// them as it would after any loss.

// Sentinel errors of PlanDown: which service did not answer.
var (
	ErrEngineUnreachable = errors.New("spawner: the engine did not answer")
	ErrRedisUnreachable  = errors.New("spawner: Redis did not answer")
)

// DownEngine is what Down asks of the engine.
type DownEngine interface {
	List(ctx context.Context, f engine.Filter) ([]engine.Instance, error)
	Remove(ctx context.Context, id string) error
	Volumes(ctx context.Context) ([]engine.Volume, error)
	RemoveVolume(ctx context.Context, name string, force bool) error
}

// DownGateway is what Down asks of the host's worker-gateway
// (gateway.Client); nil when there is none to ask.
type DownGateway interface {
	Workers(ctx context.Context) ([]string, error)
	Close(ctx context.Context, id string) error
}

// DownContainer is a container Down removes: a worker's, or another of
// the prefix (Role: a sealed worker's network namespace holder).
type DownContainer struct {
	Name     string `json:"name"`
	WorkerID string `json:"worker_id,omitempty"`
	Role     string `json:"role,omitempty"`
	State    string `json:"state"`
}

// DownPlan is what Down finds of a key prefix, and, after Execute, what
// it removed.
type DownPlan struct {
	Prefix      string          `json:"prefix"`
	Containers  []DownContainer `json:"containers"`
	Volumes     []string        `json:"volumes"`
	RedisUsers  []string        `json:"redis_users"`  // worker ids whose Redis user goes
	GatewayDirs []string        `json:"gateway_dirs"` // worker ids whose gateway directory goes
	// GatewayError says why the gateway was not asked (it did not answer,
	// or none is configured): its directories are left.
	GatewayError string `json:"gateway_error,omitempty"`
}

// Empty reports whether there is nothing to remove.
func (p DownPlan) Empty() bool {
	return len(p.Containers)+len(p.Volumes)+len(p.RedisUsers)+len(p.GatewayDirs) == 0
}

// Down holds what PlanDown and Execute use.
type Down struct {
	Engine  DownEngine
	Redis   redis.Cmdable
	Keys    protocol.Keys
	Gateway DownGateway   // nil: no gateway
	Timeout time.Duration // of each engine, Redis and gateway call (0: 30s)
}

func (d *Down) timeout() time.Duration {
	if d.Timeout > 0 {
		return d.Timeout
	}
	return 30 * time.Second
}

// PlanDown lists what Down would remove. An engine or Redis that does
// not answer is an error (ErrEngineUnreachable, ErrRedisUnreachable); a
// gateway that does not is noted in the plan.
func (d *Down) PlanDown(ctx context.Context) (DownPlan, error) {
	plan := DownPlan{Prefix: d.Keys.Prefix}
	cctx, cancel := context.WithTimeout(ctx, d.timeout())
	defer cancel()
	// Every instance of the prefix: the workers' and what the engine keeps
	// beside them (Docker: spare network namespaces' holders).
	cs, err := d.Engine.List(cctx, engine.Filter{Spares: true})
	if err != nil {
		return plan, fmt.Errorf("%w: list containers: %w", ErrEngineUnreachable, err)
	}
	ids := map[string]bool{}
	for _, c := range cs {
		name := c.Name
		if name == "" {
			name = c.ID[:min(12, len(c.ID))]
		}
		id := c.Worker
		plan.Containers = append(plan.Containers, DownContainer{Name: name, WorkerID: id, Role: c.Role, State: string(c.State)})
		if id != "" {
			ids[id] = true
		}
	}
	vs, err := d.Engine.Volumes(cctx)
	if err != nil {
		return plan, fmt.Errorf("%w: list volumes: %w", ErrEngineUnreachable, err)
	}
	for _, v := range vs {
		plan.Volumes = append(plan.Volumes, v.Name)
	}
	r := rdb.New(d.Redis, d.Keys)
	if err := r.Ping(cctx); err != nil {
		return plan, fmt.Errorf("%w: %w", ErrRedisUnreachable, err)
	}
	acl, err := r.ACLSupported(cctx)
	if err != nil {
		return plan, fmt.Errorf("%w: %w", ErrRedisUnreachable, err)
	}
	if acl {
		if plan.RedisUsers, err = r.WorkerUsers(cctx); err != nil {
			return plan, fmt.Errorf("%w: worker users: %w", ErrRedisUnreachable, err)
		}
	}
	workers, err := r.Workers(cctx)
	if err != nil {
		return plan, fmt.Errorf("%w: workers: %w", ErrRedisUnreachable, err)
	}
	for _, id := range append(workers, plan.RedisUsers...) {
		ids[id] = true
	}
	plan.GatewayDirs, plan.GatewayError = d.gatewayDirs(cctx, ids)
	sort.Slice(plan.Containers, func(i, j int) bool { return plan.Containers[i].Name < plan.Containers[j].Name })
	sort.Strings(plan.Volumes)
	sort.Strings(plan.RedisUsers)
	return plan, nil
}

// gatewayDirs returns the gateway's workers that are the prefix's (ids),
// or why it was not asked.
func (d *Down) gatewayDirs(ctx context.Context, ids map[string]bool) ([]string, string) {
	if d.Gateway == nil {
		return nil, "no gateway configured"
	}
	served, err := d.Gateway.Workers(ctx)
	if err != nil {
		return nil, err.Error()
	}
	var out []string
	for _, id := range served {
		if ids[id] {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out, ""
}

// Execute removes what plan lists, containers first (killed: their
// manager is gone, no one waits for their tasks), then their volumes,
// gateway directories and Redis users. It returns what it removed; an
// error stops it at the first part that failed (a thing already gone is
// no error).
func (d *Down) Execute(ctx context.Context, plan DownPlan) (DownPlan, error) {
	done := DownPlan{Prefix: plan.Prefix, GatewayError: plan.GatewayError}
	for _, c := range plan.Containers {
		cctx, cancel := context.WithTimeout(ctx, d.timeout())
		err := d.Engine.Remove(cctx, c.Name)
		cancel()
		if err != nil && !errors.Is(err, engine.ErrNotFound) {
			return done, fmt.Errorf("remove container %s: %w", c.Name, err)
		}
		done.Containers = append(done.Containers, c)
	}
	for _, v := range plan.Volumes {
		cctx, cancel := context.WithTimeout(ctx, d.timeout())
		err := d.Engine.RemoveVolume(cctx, v, true)
		cancel()
		if err != nil {
			return done, fmt.Errorf("remove volume %s: %w", v, err)
		}
		done.Volumes = append(done.Volumes, v)
	}
	for _, id := range plan.GatewayDirs {
		cctx, cancel := context.WithTimeout(ctx, d.timeout())
		err := d.Gateway.Close(cctx, id)
		cancel()
		if err != nil {
			return done, fmt.Errorf("close worker %s at the gateway: %w", id, err)
		}
		done.GatewayDirs = append(done.GatewayDirs, id)
	}
	r := rdb.New(d.Redis, d.Keys)
	for _, id := range plan.RedisUsers {
		cctx, cancel := context.WithTimeout(ctx, d.timeout())
		err := r.DeleteWorkerUser(cctx, id)
		cancel()
		if err != nil {
			return done, fmt.Errorf("%w: delete the Redis user of %s: %w", ErrRedisUnreachable, id, err)
		}
		done.RedisUsers = append(done.RedisUsers, id)
	}
	return done, nil
}
