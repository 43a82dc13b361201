package docker

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/errdefs"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/internal/ctlplane"
)

// A sealed worker's container has a network namespace of its own with
// loopback only. The engine makes one at the container's start, and that
// costs more than the rest of the start together (measured: a start on
// Docker's none network takes 100-200 ms longer than on the host's). So
// the spawner keeps a few namespaces made ahead of time: each is held by
// a tiny container of its own (a holder: sleep, no capabilities, read-only,
// on the none network), and a sealed worker joins one holder's namespace
// (network mode container:<holder>) instead of waiting for a new one.
// One holder serves one worker: no two workers ever share a namespace, and
// a namespace is never used twice. Once the worker's container has started
// in it, the holder is removed: the namespace lives on as long as the
// worker's processes are in it, loopback and all (the engine stops, pauses,
// execs into and removes such a container as any other; it cannot start it
// again, which the runtime never does: a worker's next incarnation is a new
// container).
//
// The holder's removal and the refill it calls for are engine work (a
// container removed, another made and started: 100 ms or more of the
// engine's time), so they wait until the worker had its start to itself
// (settle after it; measured, a refill beside the start made a sealed
// create 15-20 ms slower than one on the host's network). A pool that runs
// dry refills at once: a burst of creates needs namespaces more than quiet.
//
// Holders carry the key prefix label (so that every count and clean-up of
// a prefix's containers sees them) but not the managed label (set to
// "false" over their image's): they are not workers, and the reconciler
// leaves them to this component. A live manager marks its spare holders
// in Redis (a key with a TTL of one lease, renewed while it runs); the
// reconciliation removes every holder of the prefix on its engine that no
// container waits to start in and that is not marked, or is one of its own
// manager id's but not among its spares (left by an earlier run of the
// same manager): a dead manager's spares go within one lease, or at once
// when it comes back.

// Holder labels: the role says what the container is, the manager which
// manager's spare it was made as.
const (
	labelRole       = LabelRole
	labelHolderOf   = protocol.LabelPrefix + "holder_manager"
	roleNetnsHolder = RoleNetnsHolder
	holderMemory    = 16 << 20
	holderPids      = 8
	// netnsSettle: how long a started worker has the engine to itself
	// before its holder goes and a spare is made (a wrapper is up and
	// has said so well within it).
	netnsSettle = 500 * time.Millisecond
)

// netnsParams is what the namespace pool is given.
type netnsParams struct {
	docker    Client
	image     func() string // the image holders run (the worker base image)
	prefix    string
	managerID string
	host      func() string
	spare     int           // how many holders are kept ready; 0: none (each worker gets a new namespace)
	settle    time.Duration // how long after a worker's start its holder goes and the refill starts
	markTTL   time.Duration // how long a spare's mark lasts unless renewed (LEASE_TTL: a dead manager's spares go within one lease)
	mark      func(ctx context.Context, ids []string, ttl time.Duration) error
	marked    func(ctx context.Context, ids []string) (map[string]bool, error)
	log       interface{ Warn(string, ...any) }
}

// netnsPool keeps spare holders and hands them out.
type netnsPool struct {
	netnsParams

	mu       sync.Mutex
	free     []string               // holder container ids, ready
	taken    map[string]time.Time   // handed out to creates, when
	settling map[string]*time.Timer // holders of started workers, removed when their timer fires
	filling  bool
	// making is the holder a refill has made and not yet placed among
	// the spares (it is being started): this pool's, whatever its age.
	making string
	closed bool
	stop   chan struct{}  // closed by close: the marks' renewal ends
	fills  sync.WaitGroup // the refill and the removals of started workers' holders under way: close waits for them
}

func newNetnsPool(p netnsParams) *netnsPool {
	pool := &netnsPool{netnsParams: p, stop: make(chan struct{}), taken: map[string]time.Time{}, settling: map[string]*time.Timer{}}
	if p.spare > 0 {
		go pool.renew()
	}
	return pool
}

// renew keeps the spare holders marked until the pool closes.
func (p *netnsPool) renew() {
	t := time.NewTicker(p.markTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		p.mu.Lock()
		ids := append([]string(nil), p.free...)
		p.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), p.markTTL/3)
		if err := p.mark(ctx, ids, p.markTTL); err != nil {
			p.log.Warn("spare netns holders not marked", "err", err)
		}
		cancel()
	}
}

// warm starts making the spare holders (a manager's start: its first
// sealed create finds one ready).
func (p *netnsPool) warm() {
	if p == nil || p.spare <= 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.kickLocked()
}

// take returns the holder of a spare namespace for a new sealed
// container, or "" (a namespace of its own) when no spare is ready.
// The refill starts at once when none is left, else once the worker
// started (started) or its create failed (release).
func (p *netnsPool) take() string {
	if p == nil || p.spare <= 0 {
		return ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.free) == 0 {
		p.kickLocked()
		return ""
	}
	id := p.free[0]
	p.free = p.free[1:]
	p.taken[id] = time.Now()
	if len(p.free) == 0 {
		p.kickLocked()
	}
	return id // still marked: the create has a TTL to start it
}

// LabelRole says what a container of the prefix that is no worker is;
// RoleNetnsHolder is a spare network namespace's holder.
const (
	LabelRole       = protocol.LabelPrefix + "role"
	RoleNetnsHolder = "netns-holder"
)

// HolderOf returns the holder id of a network mode, or "".
func HolderOf(mode container.NetworkMode) string { return holderOf(mode) }

// holderOf returns the holder id of a network mode, or "".
func holderOf(mode container.NetworkMode) string {
	id, ok := strings.CutPrefix(string(mode), "container:")
	if !ok {
		return ""
	}
	return id
}

// release removes a holder at once (its container was never made, or did
// not start) and refills. The namespace is not used again.
func (p *netnsPool) release(ctx context.Context, id string) {
	if p == nil || id == "" {
		return
	}
	p.remove(ctx, id)
	p.mu.Lock()
	p.kickLocked()
	p.mu.Unlock()
}

// started removes the holder of a container that started in its
// namespace (which lives on with it) settle later, and refills then.
func (p *netnsPool) started(id string) {
	if p == nil || id == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		go p.remove(context.Background(), id)
		return
	}
	p.settling[id] = time.AfterFunc(p.settle, func() {
		p.mu.Lock()
		_, mine := p.settling[id]
		delete(p.settling, id)
		if mine {
			p.fills.Add(1) // before close can wait: close takes the map under the lock
		}
		p.mu.Unlock()
		if !mine {
			return // close took it
		}
		defer p.fills.Done()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		p.release(ctx, id)
	})
}

func (p *netnsPool) remove(ctx context.Context, id string) {
	err := p.docker.ContainerRemove(context.WithoutCancel(ctx), id, container.RemoveOptions{Force: true})
	if err != nil && !errdefs.IsNotFound(err) {
		p.log.Warn("netns holder not removed", "container_id", id, "err", err)
	}
}

// kickLocked starts a refill unless one runs or the pool is closed.
func (p *netnsPool) kickLocked() {
	if p.filling || p.closed || len(p.free) >= p.spare {
		return
	}
	p.filling = true
	p.fills.Add(1)
	go func() {
		defer p.fills.Done()
		p.fill()
	}()
}

// fill makes holders until spare are ready.
func (p *netnsPool) fill() {
	for {
		p.mu.Lock()
		if p.closed || len(p.free) >= p.spare {
			p.filling = false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		id, err := p.make(ctx)
		cancel()
		p.mu.Lock()
		p.making = ""
		switch {
		case err != nil:
			p.filling = false
			p.mu.Unlock()
			p.log.Warn("netns holder not made: sealed workers get a namespace of their own meanwhile", "err", err)
			return
		case p.closed:
			p.mu.Unlock()
			p.remove(context.Background(), id)
			continue
		}
		p.free = append(p.free, id)
		p.mu.Unlock()
	}
}

// make creates and starts one holder.
func (p *netnsPool) make(ctx context.Context) (string, error) {
	ro := true
	cfg := &container.Config{
		Image: p.image(), Entrypoint: []string{"sleep", "infinity"}, User: "65534:65534",
		// Managed "false" over the base image's own "true": a holder is
		// not a worker, and the reconciler must not take it for an orphan.
		Labels: map[string]string{labelRole: roleNetnsHolder, protocol.LabelManaged: "false", protocol.LabelKeyPrefix: p.prefix, labelHolderOf: p.managerID,
			ctlplane.LabelHost: p.host(), protocol.LabelCreatedAt: protocol.FormatTime(time.Now())},
	}
	hc := &container.HostConfig{
		NetworkMode: "none", ReadonlyRootfs: ro, CapDrop: []string{"ALL"}, SecurityOpt: []string{"no-new-privileges"},
		Resources: container.Resources{Memory: holderMemory, PidsLimit: ptr(int64(holderPids)), NanoCPUs: 1e8},
		Init:      ptr(false),
	}
	resp, err := p.docker.ContainerCreate(ctx, cfg, hc, nil, nil, "")
	if err != nil {
		return "", err
	}
	// A start that takes longer than a mark's TTL (a loaded engine) must
	// not let a sweep take the holder for an earlier run's.
	p.mu.Lock()
	p.making = resp.ID
	p.mu.Unlock()
	if err := p.mark(ctx, []string{resp.ID}, p.markTTL); err != nil {
		p.remove(ctx, resp.ID)
		return "", err
	}
	if err := p.docker.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		p.remove(ctx, resp.ID)
		return "", err
	}
	return resp.ID, nil
}

// settled reports whether the pool is at rest: every spare ready, no
// holder waiting to go, no refill under way.
func (p *netnsPool) settled() bool {
	if p == nil {
		return true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.free) >= p.spare && len(p.settling) == 0 && !p.filling
}

// ready returns how many spare holders are ready.
func (p *netnsPool) ready() int {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.free)
}

// close stops refills and removes the spare holders (a manager's stop:
// the holders of its workers go with them).
func (p *netnsPool) close(ctx context.Context) {
	if p == nil {
		return
	}
	p.mu.Lock()
	if !p.closed {
		close(p.stop)
	}
	p.closed = true
	free := p.free
	p.free = nil
	for id, t := range p.settling { // started workers' holders: now, not after the stop
		t.Stop()
		free = append(free, id)
	}
	p.settling = map[string]*time.Timer{}
	p.taken = map[string]time.Time{} // a create's by now started (and released) or gone: the last sweep takes the rest
	p.mu.Unlock()
	// In parallel: under a busy engine one removal takes seconds, and a
	// stopping manager has its grace period only.
	var removals sync.WaitGroup
	for _, id := range free {
		removals.Go(func() { p.remove(ctx, id) })
	}
	removals.Wait()
	// A holder being made as the pool closed is removed by its refill,
	// which sees the pool closed, and one whose timer fired is being
	// removed: wait for them, or a stopped manager leaves them behind
	// (its last sweep spares its own holders younger than a lease).
	done := make(chan struct{})
	go func() { p.fills.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// sweep removes the holders of the key prefix on this engine that no
// live manager marks spare and no container waits to start in; it
// returns how many it removed.
func (p *netnsPool) sweep(ctx context.Context) int {
	if p == nil {
		return 0
	}
	// A spare short with no holder waiting to go (a create that failed
	// between its take and its start and left its holder to a redelivery)
	// is made now: nothing else would, until the pool ran dry.
	p.mu.Lock()
	if len(p.settling) == 0 {
		p.kickLocked()
	}
	p.mu.Unlock()
	holders, err := p.docker.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(
		filters.Arg("label", labelRole+"="+roleNetnsHolder), filters.Arg("label", protocol.LabelKeyPrefix+"="+p.prefix))})
	if err != nil || len(holders) == 0 {
		return 0
	}
	created, err := p.docker.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("status", "created"))})
	if err != nil {
		return 0
	}
	waiting := map[string]bool{}
	for _, c := range created {
		if id := holderOf(container.NetworkMode(c.HostConfig.NetworkMode)); id != "" {
			waiting[id] = true
		}
	}
	ids := make([]string, len(holders))
	for i, h := range holders {
		ids[i] = h.ID
	}
	marked, err := p.marked(ctx, ids)
	if err != nil {
		return 0
	}
	p.mu.Lock()
	mine := map[string]bool{p.making: p.making != ""}
	for _, id := range p.free {
		mine[id] = true
	}
	for id, at := range p.taken { // a create's, until it started (or one lease)
		if time.Since(at) < p.markTTL {
			mine[id] = true
		} else {
			delete(p.taken, id)
		}
	}
	p.mu.Unlock()
	n := 0
	for _, h := range holders {
		if h.Labels[labelRole] != roleNetnsHolder || h.Labels[protocol.LabelKeyPrefix] != p.prefix {
			continue // what the filter should have left out: never remove a container that is not a holder
		}
		made, _ := protocol.ParseTime(h.Labels[protocol.LabelCreatedAt])
		if h.Labels[labelHolderOf] == p.managerID && time.Since(made) < p.markTTL {
			continue // this manager's refill, between the holder's create and its place among the spares
		}
		earlierRun := h.Labels[labelHolderOf] == p.managerID && !mine[h.ID]
		if waiting[h.ID] || mine[h.ID] || (marked[h.ID] && !earlierRun) {
			continue
		}
		p.remove(ctx, h.ID)
		n++
	}
	return n
}
