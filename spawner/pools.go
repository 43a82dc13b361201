package spawner

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/internal/rdb"
)

// Pools. A pool template (POOLS, or POOLS_FILE) names a worker spec and
// how many workers of it to keep ahead:
//
//   - min_warm: workers made ahead, started, then paused (the warm set). A
//     create whose spec is the template's takes one (an SPOP, then an
//     unpause: no container is made) and the pool refills in the
//     background; with no warm worker ready the create is made cold.
//     A warm worker waits paused for as long as it takes: the pause
//     timeout does not retire it.
//   - max_total: the pool's workers, warm and allocated, never exceed it.
//   - recycle_after: an allocated worker that served this many tasks is
//     retired when idle and replaced (its waiting tasks move), like a dead
//     one.
//   - idle_timeout: a worker of the pool (allocated, or of its size)
//     idle this long is paused (in place of IDLE_TIMEOUT_SECONDS).
//   - size: workers of the spec kept running from the manager's start,
//     replaced when they die (PRD-018's pool size; for developer workers,
//     which share a queue).
//
// A number left out takes the design's policy (PoolDefaults): min_warm 3
// (0 for a pool with a size or of developers), max_total 20 (or more when
// min_warm or size asks), recycle_after 10, idle_timeout 5m.
//
// Pools count against MAX_CONCURRENT_WORKERS and give way to explicit
// creates: a refill never takes a slot while a create waits for one, and a
// create at the limit retires a warm worker before it queues.

var poolName = regexp.MustCompile(`^[a-zA-Z0-9_.-]{1,64}$`)

// PoolDefaults are the numbers a pool template that leaves them out gets
// (the design's pool policy).
var PoolDefaults = struct {
	MinWarm, MaxTotal, RecycleAfter int
	IdleTimeout                     time.Duration
}{MinWarm: 3, MaxTotal: 20, RecycleAfter: 10, IdleTimeout: 5 * time.Minute}

// PoolTemplate is one pool of the configuration.
type PoolTemplate struct {
	Name         string
	Spec         protocol.WorkerSpec
	MinWarm      int
	MaxTotal     int
	RecycleAfter int
	Size         int
	IdleTimeout  time.Duration // 0: IDLE_TIMEOUT_SECONDS

	key string // the spec's canonical form, for matching
}

// poolJSON is a template as written: a number left out is nil.
type poolJSON struct {
	Name         string              `json:"name"`
	Spec         protocol.WorkerSpec `json:"spec"`
	MinWarm      *int                `json:"min_warm,omitempty"`
	MaxTotal     *int                `json:"max_total,omitempty"`
	RecycleAfter *int                `json:"recycle_after,omitempty"`
	Size         int                 `json:"size,omitempty"`
	IdleTimeout  string              `json:"idle_timeout,omitempty"` // a Go duration ("5m")
}

// MarshalJSON writes a template with every number (as published for
// `workerctl pools`).
func (p PoolTemplate) MarshalJSON() ([]byte, error) {
	j := poolJSON{Name: p.Name, Spec: p.Spec, MinWarm: &p.MinWarm, MaxTotal: &p.MaxTotal, RecycleAfter: &p.RecycleAfter, Size: p.Size}
	if p.IdleTimeout > 0 {
		j.IdleTimeout = p.IdleTimeout.String()
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads a template, unknown fields refused, and fills the
// numbers left out with PoolDefaults.
func (p *PoolTemplate) UnmarshalJSON(data []byte) error {
	var j poolJSON
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return err
	}
	*p = PoolTemplate{Name: j.Name, Spec: j.Spec, Size: j.Size, RecycleAfter: PoolDefaults.RecycleAfter, IdleTimeout: PoolDefaults.IdleTimeout}
	if j.MinWarm != nil {
		p.MinWarm = *j.MinWarm
	} else if j.Size == 0 && j.Spec.Kind != protocol.KindDeveloper {
		p.MinWarm = PoolDefaults.MinWarm
	}
	if j.MaxTotal != nil {
		p.MaxTotal = *j.MaxTotal
	} else {
		p.MaxTotal = max(PoolDefaults.MaxTotal, p.MinWarm, p.Size)
	}
	if j.RecycleAfter != nil {
		p.RecycleAfter = *j.RecycleAfter
	}
	if j.IdleTimeout != "" {
		d, err := time.ParseDuration(j.IdleTimeout)
		if err != nil || d <= 0 {
			return fmt.Errorf("pool %s: idle_timeout %q: want a positive duration such as 5m", j.Name, j.IdleTimeout)
		}
		p.IdleTimeout = d
	}
	return nil
}

// ParsePools reads pool templates from JSON (an array) and checks them.
func ParsePools(data []byte) ([]PoolTemplate, error) {
	var ps []PoolTemplate
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ps); err != nil {
		return nil, fmt.Errorf("want a JSON array of pool templates: %w", err)
	}
	seen := map[string]bool{}
	for i := range ps {
		p := &ps[i]
		if !poolName.MatchString(p.Name) || seen[p.Name] {
			return nil, fmt.Errorf("pool %d: name %q: want a unique name of letters, digits, '_', '.', '-'", i, p.Name)
		}
		seen[p.Name] = true
		if err := p.Spec.Validate(); err != nil {
			return nil, fmt.Errorf("pool %s: %w", p.Name, err)
		}
		if p.MinWarm < 0 || p.MaxTotal < 0 || p.RecycleAfter < 0 || p.Size < 0 {
			return nil, fmt.Errorf("pool %s: counts must not be negative", p.Name)
		}
		if p.MinWarm > p.MaxTotal || p.Size > p.MaxTotal {
			return nil, fmt.Errorf("pool %s: min_warm and size must not pass max_total", p.Name)
		}
		if p.MinWarm > 0 && p.Spec.Kind == protocol.KindDeveloper {
			return nil, fmt.Errorf("pool %s: developer workers share a queue: give them a size, not min_warm", p.Name)
		}
		p.key = specKey(p.Spec)
	}
	return ps, nil
}

// poolsFromEnv reads POOLS (JSON) or POOLS_FILE (a path to it).
func poolsFromEnv(getenv func(string) string) ([]PoolTemplate, error) {
	data := []byte(getenv("POOLS"))
	if path := getenv("POOLS_FILE"); path != "" {
		var err error
		if data, err = os.ReadFile(path); err != nil {
			return nil, err
		}
	}
	if len(data) == 0 {
		return nil, nil
	}
	return ParsePools(data)
}

// specKey is a spec in canonical form: two specs that make the same
// worker have the same key.
func specKey(spec protocol.WorkerSpec) string {
	if spec.Kind == "" {
		spec.Kind = protocol.KindLongLived
	}
	spec.Capabilities, _ = protocol.NormalizeCapabilities(spec.Capabilities)
	if len(spec.Capabilities) == 0 {
		spec.Capabilities = nil
	}
	return specJSON(spec)
}

// poolFor returns the warm pool whose template a create's spec is, or nil.
func (s *Spawner) poolFor(spec protocol.WorkerSpec) *PoolTemplate {
	key := specKey(spec)
	for i := range s.cfg.Pools {
		if p := &s.cfg.Pools[i]; p.MinWarm > 0 && p.key == key {
			return p
		}
	}
	return nil
}

// poolEnv is what a warm worker's wrapper gets beyond a worker's usual
// environment: a Claude worker keeps one agent process (AGENT_PERSISTENT)
// and starts it before any task (AGENT_PREWARM), so that the create that
// takes it finds its agent up.
func poolEnv(spec protocol.WorkerSpec, o createOpts) []string {
	if o.poolState != protocol.PoolWarm || spec.AgentType != protocol.AgentClaude || spec.Kind == protocol.KindDeveloper {
		return nil
	}
	return []string{"AGENT_PERSISTENT=true", "AGENT_PREWARM=true"}
}

// allocate gives a create a warm worker of pool p: it reports false when
// none is ready. The command's id is bound to the worker first, so a
// command delivered again gets the same one.
func (s *Spawner) allocate(ctx context.Context, commandID string, p *PoolTemplate, forward func(ctx context.Context, host string) error) (protocol.WorkerInfo, bool, error) {
	start := s.now()
	if commandID != "" {
		if id, err := s.rdb.CommandWorkerOf(ctx, commandID); err != nil || id != "" {
			return protocol.WorkerInfo{}, false, err // the command made or took one: create continues it
		}
	}
	var skipped []string // degraded warm workers taken out of the ready set
	defer func() {
		for _, id := range skipped {
			_ = s.rdb.AddWarm(ctx, p.Name, id)
		}
	}()
	for {
		id, err := s.rdb.TakeWarm(ctx, p.Name)
		if err != nil {
			return protocol.WorkerInfo{}, false, redisError(err, "pool %s", p.Name)
		}
		if id == "" {
			return protocol.WorkerInfo{}, false, nil
		}
		if rt, err := s.fleet.Route(ctx, id); err != nil || !rt.Here {
			// Another host's warm worker: only its managers can wake it
			// (and one whose host cannot be read now is left in the pool).
			_ = s.rdb.AddWarm(ctx, p.Name, id)
			if err == nil && rt.Live && forward != nil && commandID != "" {
				if err := forward(ctx, rt.Host); err != nil {
					return protocol.WorkerInfo{}, false, err
				}
				return protocol.WorkerInfo{Status: protocol.ContainerQueued, Host: rt.Host}, true, errForwarded
			}
			return protocol.WorkerInfo{}, false, nil // made cold here
		}
		if health, _ := s.rdb.StatusField(ctx, id, protocol.StatusFieldHealth); health == string(protocol.HealthDegraded) {
			// Not allocated; it goes back to the ready set when this
			// allocation ends.
			s.log.Warn("a degraded warm worker is not allocated", "pool", p.Name, "worker_id", id)
			skipped = append(skipped, id)
			continue
		}
		if commandID != "" {
			if got, err := s.rdb.CommandWorker(ctx, commandID, id); err != nil {
				return protocol.WorkerInfo{}, false, redisError(err, "command %s", commandID)
			} else if got != id {
				_ = s.rdb.AddWarm(ctx, p.Name, id) // another delivery of the command won
				return protocol.WorkerInfo{}, false, nil
			}
		}
		// The hot path: one engine call (the unpause, by name: no inspect)
		// and a few Redis writes; the reply is built from the status hash.
		// Allocated before its status says running: the pool's tending
		// pauses and offers a running, idle warm worker it does not find
		// in the ready set, which this one, taken, no longer is. Its
		// status next, while it is frozen (Unpause says why).
		s.writeStatus(ctx, id, map[string]any{protocol.StatusFieldPoolState: protocol.PoolAllocated})
		s.wakeStatus(ctx, id)
		if err := s.engine.Resume(ctx, ContainerName(id)); err != nil {
			// Gone meanwhile (died, retired), or not paused: the next one.
			// A warm worker again, for the tending (or the health checks)
			// to offer or remove.
			s.log.Warn("a warm worker could not be woken", "pool", p.Name, "worker_id", id, "err", err)
			s.writeStatus(ctx, id, map[string]any{protocol.StatusFieldPoolState: protocol.PoolWarm})
			continue
		}
		wait := s.now().Sub(start)
		if s.suspends() {
			s.lifecycle(ctx, id, protocol.EventUnpaused, nil)
		}
		s.lifecycle(ctx, id, protocol.EventAllocated, map[string]any{"pool": p.Name, "wait_ms": wait.Milliseconds()})
		_ = s.rdb.CountPool(ctx, p.Name, map[string]int64{"allocations": 1, "allocation_wait_us": wait.Microseconds()})
		s.obs.poolAllocated(p.Name, "warm", wait)
		h, err := s.rdb.Status(ctx, id)
		if err != nil {
			return protocol.WorkerInfo{}, true, redisError(err, "status of %s", id)
		}
		return InfoFromHash(id, h), true, nil
	}
}

// Pools keeps every pool filled: warm workers made and paused, the pool
// size kept, allocated workers recycled. It runs on the leader.
type Pools struct {
	job
	*env
	templates []PoolTemplate
	workers   poolWorkers
}

// poolWorkers are the operations a pool's tending calls (the Spawner's).
type poolWorkers interface {
	retirer
	Pause(ctx context.Context, id string) error
	create(ctx context.Context, commandID string, spec protocol.WorkerSpec, o createOpts) (protocol.WorkerInfo, error)
}

func newPools(e *env, templates []PoolTemplate, w poolWorkers) *Pools {
	return &Pools{env: e, templates: templates, workers: w}
}

// Start fills pools until Stop.
func (p *Pools) Start(ctx context.Context) { p.start(ctx, p.run) }

func (p *Pools) run(ctx context.Context) {
	p.backfill(ctx)
	published := time.Time{}
	every(ctx, 250*time.Millisecond, func(ctx context.Context) {
		if time.Since(published) > 5*time.Second {
			published = time.Now()
			templates := map[string]string{}
			for _, t := range p.templates {
				b, _ := json.Marshal(t)
				templates[t.Name] = string(b)
			}
			if err := p.rdb.PublishPools(ctx, templates); err != nil {
				p.log.Warn("publish the pool templates", "err", err)
			}
		}
		for i := range p.templates {
			p.tendPool(ctx, &p.templates[i])
		}
	})
}

// backfill records in their pools' member sets the pool workers made
// before the sets existed (their status hash names their pool): one read
// of the fleet when a leader starts tending, none after.
func (s *Pools) backfill(ctx context.Context) {
	names := map[string]bool{}
	for _, t := range s.templates {
		names[t.Name] = true
	}
	_ = s.eachWorker(ctx, func(ctx context.Context, id string) {
		pool, err := s.rdb.StatusField(ctx, id, protocol.StatusFieldPool)
		if err == nil && names[pool] {
			_ = s.rdb.AddPoolMember(ctx, pool, id)
		}
	})
}

// poolMember is one worker of a pool as its status hash says.
type poolMember struct {
	id, state, container, workerState, health string
	tasks                                     int
}

// tendPool brings one pool to its counts. It reads the pool's own
// members only (PoolMembers), never every worker's status.
func (s *Pools) tendPool(ctx context.Context, p *PoolTemplate) {
	ids, err := s.rdb.PoolMembers(ctx, p.Name)
	if err != nil {
		return
	}
	var members []poolMember
	for _, id := range ids {
		h, err := s.rdb.Status(ctx, id)
		if err != nil {
			return
		}
		members = append(members, poolMember{id: id, state: h[protocol.StatusFieldPoolState], container: h[protocol.StatusFieldContainer],
			workerState: h[protocol.StatusFieldState], health: h[protocol.StatusFieldHealth], tasks: atoi(h[protocol.StatusFieldTasksDone])})
	}
	warm, _ := s.rdb.Warm(ctx, p.Name)
	ready := map[string]bool{}
	for _, id := range warm {
		ready[id] = true
	}
	warmCount, sized := 0, 0
	for _, m := range members {
		switch m.state {
		case protocol.PoolWarm:
			warmCount++
			if !ready[m.id] && m.container == string(protocol.ContainerRunning) && m.workerState == string(protocol.WorkerIdle) &&
				m.health != string(protocol.HealthDegraded) {
				// Started, idle and not degraded: freeze it and offer it.
				if err := s.workers.Pause(ctx, m.id); err == nil {
					_ = s.rdb.AddWarm(ctx, p.Name, m.id)
				}
			}
		case protocol.PoolMember:
			sized++
		case protocol.PoolAllocated:
			idle := m.workerState == string(protocol.WorkerIdle) || m.workerState == string(protocol.WorkerPaused)
			if p.RecycleAfter > 0 && m.tasks >= p.RecycleAfter && idle {
				s.recycle(ctx, p, m)
			}
		}
	}
	total := len(members)
	for ; warmCount < p.MinWarm && total < p.MaxTotal; warmCount, total = warmCount+1, total+1 {
		if !s.refill(ctx, p, protocol.PoolWarm) {
			return
		}
	}
	for ; sized < p.Size && total < p.MaxTotal; sized, total = sized+1, total+1 {
		if !s.refill(ctx, p, protocol.PoolMember) {
			return
		}
	}
}

// refill makes one worker of a pool, if a slot is free with no create
// waiting for it, and says whether it did.
func (s *Pools) refill(ctx context.Context, p *PoolTemplate, state string) bool {
	info, err := s.workers.create(ctx, "", p.Spec, createOpts{tryOnly: true, pool: p.Name, poolState: state})
	if err != nil {
		if !IsResourceExhausted(err) {
			s.log.Warn("pool refill", "pool", p.Name, "err", err)
		}
		return false
	}
	_ = s.rdb.CountPool(ctx, p.Name, map[string]int64{"refills": 1})
	s.log.Info("pool refilled", "pool", p.Name, "worker_id", info.WorkerID, "pool_state", state)
	return true
}

// recycle retires an allocated worker that served recycle_after tasks and
// replaces it (its waiting tasks move to the replacement).
func (s *Pools) recycle(ctx context.Context, p *PoolTemplate, m poolMember) {
	s.lifecycle(ctx, m.id, protocol.EventRecycled, map[string]any{"pool": p.Name, "tasks": m.tasks})
	_ = s.rdb.CountPool(ctx, p.Name, map[string]int64{"recycles": 1})
	if _, err := s.workers.retire(ctx, m.id, retirement{reason: protocol.RemovedRecycled, graceful: true, code: protocol.CodeTerminated,
		msg: "the worker was recycled", replace: true}); err != nil {
		s.log.Warn("recycle a pool worker", "worker_id", m.id, "err", err)
	}
}

// PoolStatus is what `workerctl pools` shows of one pool.
type PoolStatus struct {
	Name        string  `json:"name"`
	Warm        int     `json:"warm"`      // ready to allocate
	Allocated   int     `json:"allocated"` // given to creates, alive
	Members     int     `json:"members"`   // of its fixed size, alive
	MinWarm     int     `json:"min_warm"`
	MaxTotal    int     `json:"max_total"`
	Utilization float64 `json:"utilization"` // allocated / (warm + allocated)
	Allocations int64   `json:"allocations"`
	WaitMeanMS  float64 `json:"allocation_wait_mean_ms"`
	Refills     int64   `json:"refills"`
	Recycles    int64   `json:"recycles"`
}

// Pools returns the figures of every configured pool.
func (s *Spawner) Pools(ctx context.Context) ([]PoolStatus, error) {
	return poolFigures(ctx, s.rdb, s.cfg.Pools)
}

// ListPools returns the figures of the pools the managers of this key
// prefix serve, from Redis alone (what `workerctl pools` shows).
func ListPools(ctx context.Context, rc redis.Cmdable, keys protocol.Keys) ([]PoolStatus, error) {
	return listPools(ctx, rdb.New(rc, keys))
}

func listPools(ctx context.Context, r *rdb.RDB) ([]PoolStatus, error) {
	raw, err := r.PoolTemplates(ctx)
	if err != nil {
		return nil, redisError(err, "pools")
	}
	var ts []PoolTemplate
	for _, v := range raw {
		var t PoolTemplate
		if json.Unmarshal([]byte(v), &t) == nil {
			ts = append(ts, t)
		}
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].Name < ts[j].Name })
	return poolFigures(ctx, r, ts)
}

func poolFigures(ctx context.Context, r *rdb.RDB, pools []PoolTemplate) ([]PoolStatus, error) {
	out := make([]PoolStatus, 0, len(pools))
	for _, p := range pools {
		st := PoolStatus{Name: p.Name, MinWarm: p.MinWarm, MaxTotal: p.MaxTotal}
		ids, err := r.PoolMembers(ctx, p.Name)
		if err != nil {
			return nil, redisError(err, "pool %s", p.Name)
		}
		for _, id := range ids {
			h, err := r.Status(ctx, id)
			if err != nil {
				return nil, redisError(err, "status of %s", id)
			}
			switch h[protocol.StatusFieldPoolState] {
			case protocol.PoolAllocated:
				st.Allocated++
			case protocol.PoolMember:
				st.Members++
			}
		}
		warm, err := r.Warm(ctx, p.Name)
		if err != nil {
			return nil, redisError(err, "pool %s", p.Name)
		}
		st.Warm = len(warm)
		if st.Warm+st.Allocated > 0 {
			st.Utilization = float64(st.Allocated) / float64(st.Warm+st.Allocated)
		}
		stats, err := r.PoolStats(ctx, p.Name)
		if err != nil {
			return nil, redisError(err, "pool %s", p.Name)
		}
		n := func(f string) int64 { v, _ := strconv.ParseInt(stats[f], 10, 64); return v }
		st.Allocations, st.Refills, st.Recycles = n("allocations"), n("refills"), n("recycles")
		if st.Allocations > 0 {
			st.WaitMeanMS = float64(n("allocation_wait_us")) / 1000 / float64(st.Allocations)
		}
		out = append(out, st)
	}
	return out, nil
}
