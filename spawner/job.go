package spawner

import (
	"context"
	"sync"
	"time"
)

// job is the shape every background component shares: Start runs its
// loop in a goroutine with a context of its own; Stop cancels it and
// waits for the loop to return. Stop is idempotent and safe before Start.
type job struct {
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

func (j *job) start(ctx context.Context, loop func(ctx context.Context)) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.cancel != nil {
		return
	}
	ctx, j.cancel = context.WithCancel(ctx)
	j.done = make(chan struct{})
	go func(done chan struct{}) {
		defer close(done)
		loop(ctx)
	}(j.done)
}

// Stop cancels the loop and waits for it.
func (j *job) Stop() {
	j.mu.Lock()
	cancel, done := j.cancel, j.done
	j.cancel, j.done = nil, nil
	j.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// every calls fn now and then every interval until ctx ends.
func every(ctx context.Context, interval time.Duration, fn func(ctx context.Context)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		fn(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// eachWorker calls fn for every member of the workers set.
func (s *env) eachWorker(ctx context.Context, fn func(ctx context.Context, id string)) error {
	ids, err := s.rdb.Workers(ctx)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		fn(ctx, id)
	}
	return nil
}

// ownWorkers returns the members of the workers set placed on this host
// (or with no placement record).
func (s *env) ownWorkers(ctx context.Context) ([]string, error) {
	ids, placed, err := s.rdb.WorkersPlaced(ctx)
	if err != nil {
		return nil, err
	}
	own := ids[:0]
	for _, id := range ids {
		if s.fleet.Mine(placed[id]) {
			own = append(own, id)
		}
	}
	return own, nil
}

// renewal calls renew every interval (a third of a lease) in a goroutine
// of its own, until stop, or until renew says the lease is no more to
// renew.
type renewal struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func renewEvery(ctx context.Context, interval time.Duration, renew func(ctx context.Context) bool) *renewal {
	ctx, cancel := context.WithCancel(ctx)
	r := &renewal{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if !renew(ctx) {
					return
				}
			}
		}
	}()
	return r
}

// stop ends the renewals and waits for their goroutine.
func (r *renewal) stop() { r.cancel(); <-r.done }

// retirer retires a worker: the one path by which a worker ends
// (retirements.retire).
type retirer interface {
	retire(ctx context.Context, id string, r retirement) (bool, error)
}
