package spawner

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/internal/rdb"
)

// Wake unpauses a paused worker of this host as soon as a task waits for
// it. It reads the host's paused set (Keys.HostPaused, written with each
// worker's status) and blocks on the inputs of those workers from the
// last entry their group delivered (one XREAD): a task added to a paused
// worker's input wakes it within milliseconds, and an idle host costs two
// Redis commands every wakeInterval whatever its number of workers. A
// worker is checked (rdb.BusyDelivered: a task in flight, held or
// waiting) when it enters the set, which finds a task that arrived while
// its pause was in flight, when its input gets an entry, and every
// wakeRecheck. The host's hibernated workers are watched the same way: a
// task waiting for one makes it a new incarnation (resume, in a goroutine
// of its own: it may wait for a slot). It runs on the host's leader.
type Wake struct {
	job
	wakeParams

	// Owned by the loop's goroutine.
	watched map[string]*pausedWorker
	resumes sync.WaitGroup
	mu      sync.Mutex
	waking  map[string]bool // hibernated workers whose resume runs
}

// wakeParams is what Wake is built from.
type wakeParams struct {
	*env
	unpause func(ctx context.Context, id string) error // Spawner.Unpause
	// hibernated lists this host's hibernated workers; resume wakes one
	// (Spawner.wakeHibernated).
	hibernated func(ctx context.Context) ([]string, error)
	resume     func(ctx context.Context, id string) error
	obs        *observer
}

func newWake(p wakeParams) *Wake { return &Wake{wakeParams: p} }

// pausedWorker is a worker of the paused set that Wake watches.
type pausedWorker struct {
	inputs     []string  // its input streams (the developer queues for a developer worker)
	group      string    // and their consumer group
	after      []string  // of each input, the last entry the group delivered: a later one is a task waiting
	checked    time.Time // when it was last checked
	notTill    time.Time // after a wake-up, no other before this
	hibernated bool      // it has no container: a wake-up is a new incarnation
}

const (
	// wakeInterval bounds how long a worker just paused goes unwatched,
	// and the blocking read.
	wakeInterval = 50 * time.Millisecond
	// wakeRecheck is how often a watched worker is checked in full
	// although its input got nothing.
	wakeRecheck = 10 * time.Second
	// wakeBackoff is how long a worker just woken is left alone: its
	// unpause takes it out of the set, or failed and is tried again.
	wakeBackoff = time.Second
)

// Start checks until Stop.
func (w *Wake) Start(ctx context.Context) { w.start(ctx, w.run) }

func (w *Wake) run(ctx context.Context) {
	w.watched, w.waking = map[string]*pausedWorker{}, map[string]bool{}
	defer w.resumes.Wait()
	retry := newRetry()
	for ctx.Err() == nil {
		ids, err := w.rdb.Paused(ctx, w.Host())
		var hib []string
		if err == nil && w.hibernated != nil {
			hib, err = w.hibernated(ctx)
		}
		if err != nil {
			if ctx.Err() == nil {
				w.log.Warn("wake on input: read the paused set", "err", err)
				sleepCtx(ctx, retry.NextBackOff())
			}
			continue
		}
		retry.Reset()
		streams := w.watch(ctx, ids, hib)
		if len(streams) == 0 {
			sleepCtx(ctx, wakeInterval)
			continue
		}
		names, after := make([]string, 0, len(streams)), make([]string, 0, len(streams))
		for stream, from := range streams {
			names, after = append(names, stream), append(after, from)
		}
		got, err := w.rdb.WaitInputs(ctx, names, after, wakeInterval)
		if err != nil {
			if ctx.Err() == nil {
				w.log.Warn("wake on input: read the inputs", "err", err)
				sleepCtx(ctx, wakeInterval)
			}
			continue
		}
		for _, stream := range got {
			for id, p := range w.watched {
				if slices.Contains(p.inputs, stream) && time.Now().After(p.notTill) {
					w.check(ctx, id, p)
				}
			}
		}
	}
}

// watch brings the watched workers in line with the paused set ids,
// checks the new ones and those due, and returns the inputs to read: each
// stream with the entry to read after (the earliest of its workers', for
// the developer queue that several share).
func (w *Wake) watch(ctx context.Context, ids, hibernated []string) map[string]string {
	paused := make(map[string]bool, len(ids)+len(hibernated))
	for _, id := range ids {
		paused[id] = true
	}
	hib := make(map[string]bool, len(hibernated))
	for _, id := range hibernated {
		paused[id], hib[id] = true, true
	}
	ids = append(ids, hibernated...)
	for id := range w.watched {
		if !paused[id] {
			delete(w.watched, id) // woken, or retired
		}
	}
	now := time.Now()
	streams := map[string]string{}
	for _, id := range ids {
		p := w.watched[id]
		if p == nil {
			kind, err := w.rdb.StatusField(ctx, id, protocol.StatusFieldKind)
			if err != nil {
				continue
			}
			k, _, group := inputOf(w.keys, id, protocol.Kind(kind))
			p = &pausedWorker{inputs: w.keys.InputsFor(k, id), group: group}
			w.watched[id] = p
		}
		if p.hibernated != hib[id] {
			// Paused a moment ago, hibernated now: a task that waits
			// wakes it at once, whatever the paused worker's back-off.
			p.hibernated, p.notTill, p.checked = hib[id], time.Time{}, time.Time{}
		}
		if now.Before(p.notTill) {
			continue
		}
		if now.Sub(p.checked) >= wakeRecheck {
			w.check(ctx, id, p)
		}
		if len(p.after) != len(p.inputs) || now.Before(p.notTill) {
			continue
		}
		for i, input := range p.inputs {
			if from, ok := streams[input]; !ok || lessID(p.after[i], from) {
				streams[input] = p.after[i]
			}
		}
	}
	return streams
}

// check wakes a watched worker that has a task in flight, held or
// waiting, and otherwise records what its group delivered.
func (w *Wake) check(ctx context.Context, id string, p *pausedWorker) {
	busyOf := w.rdb.BusyDelivered
	if p.hibernated {
		busyOf = w.rdb.BusyAnyway
	}
	b := rdb.NotBusy
	after := make([]string, len(p.inputs))
	for i, input := range p.inputs {
		busy, delivered, err := busyOf(ctx, id, input, p.group)
		if err != nil {
			w.log.Warn("wake on input: is the worker busy", "worker_id", id, "err", err)
			return
		}
		after[i] = delivered
		if b == rdb.NotBusy {
			b = busy
		}
	}
	p.checked, p.after = time.Now(), after
	if b == rdb.NotBusy || b == rdb.BusyEnding && !p.hibernated {
		// A paused worker being retired or hibernated is not woken:
		// its retirement unpauses or removes it.
		return
	}
	p.notTill = time.Now().Add(wakeBackoff)
	if p.hibernated {
		w.resumeOnce(ctx, id)
		return
	}
	start := time.Now()
	err := w.unpause(ctx, id)
	w.obs.woken(start, err)
	if err != nil && !IsNotFound(err) {
		w.log.Warn("wake on input", "worker_id", id, "err", err)
	}
}

// resumeOnce wakes a hibernated worker in a goroutine, unless its wake
// runs already.
func (w *Wake) resumeOnce(ctx context.Context, id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.waking[id] || w.resume == nil {
		return
	}
	w.waking[id] = true
	w.resumes.Add(1)
	go func() {
		defer w.resumes.Done()
		start := time.Now()
		err := w.resume(ctx, id)
		w.obs.woken(start, err)
		if err != nil && ctx.Err() == nil {
			w.log.Warn("wake a hibernated worker", "worker_id", id, "err", err)
		}
		w.mu.Lock()
		delete(w.waking, id)
		w.mu.Unlock()
	}()
}

// lessID orders two stream entry ids ("ms-seq").
func lessID(a, b string) bool {
	am, as := splitID(a)
	bm, bs := splitID(b)
	if am != bm {
		return am < bm
	}
	return as < bs
}

func splitID(id string) (uint64, uint64) {
	var ms, seq uint64
	i := 0
	for ; i < len(id) && id[i] != '-'; i++ {
		ms = ms*10 + uint64(id[i]-'0')
	}
	for i++; i < len(id); i++ {
		seq = seq*10 + uint64(id[i]-'0')
	}
	return ms, seq
}
