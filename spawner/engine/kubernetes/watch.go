package kubernetes

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/agentvisor/agentvisor/spawner/engine"
)

// exitKilled is the exit code told for a pod deleted while its worker
// ran (Docker's for a container killed by SIGKILL).
const exitKilled = 137

// Watch streams the events of the prefix's worker pods from now until
// ctx ends: died (its container ended, it could never start, or the pod
// was deleted while it ran: exit 137) and oom. The informer relists and
// rewatches by itself when its watch breaks, so the error channel only
// closes with ctx. since is not replayed: the informer's cache is the
// state, and the caller lists what it wants of it.
func (e *Engine) Watch(ctx context.Context, since time.Time) (<-chan engine.Event, <-chan error) {
	out, errs := make(chan engine.Event), make(chan error, 1)
	if err := e.ready(ctx); err != nil {
		errs <- err
		return out, errs
	}
	in := make(chan engine.Event, 64)
	e.mu.Lock()
	e.subs[in] = ctx.Done()
	e.mu.Unlock()
	go func() {
		defer func() {
			e.mu.Lock()
			delete(e.subs, in)
			e.mu.Unlock()
		}()
		for {
			select {
			case <-ctx.Done():
				return
			case ev := <-in:
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, errs
}

// observe follows a pod's change (old nil: first seen): an end not told
// yet is told.
func (e *Engine) observe(old, obj any) {
	defer e.notify()
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	st, code, oom := stateOf(p)
	if st != engine.Exited {
		return
	}
	if code == exitNeverStarted && len(p.Spec.Containers) > 0 {
		// The node lacks the image (removed from its containerd since it
		// was loaded): the next create loads it again.
		e.Forget(p.Spec.Containers[0].Image)
	}
	e.mu.Lock()
	told := e.dead[p.UID]
	e.dead[p.UID] = true
	e.mu.Unlock()
	if told || old == nil {
		// First seen ended (a manager starting beside ended pods): the
		// reconciler's business, not an event of now.
		return
	}
	if oom {
		e.tell(engine.Event{Kind: engine.EventOOM, Worker: workerOf(p)})
	}
	e.tell(engine.Event{Kind: engine.EventDied, Worker: workerOf(p), ExitCode: code})
}

// deleted follows a pod's deletion: one whose end was not told died now.
func (e *Engine) deleted(obj any) {
	defer e.notify()
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	e.mu.Lock()
	told := e.dead[p.UID]
	delete(e.dead, p.UID)
	e.mu.Unlock()
	if told {
		return
	}
	if st, _, _ := stateOf(p); st == engine.Created {
		return // never started
	}
	e.tell(engine.Event{Kind: engine.EventDied, Worker: workerOf(p), ExitCode: exitKilled})
}

// tell hands an event to every watcher whose context has not ended,
// waiting for each (the informer's handler has a queue of its own).
func (e *Engine) tell(ev engine.Event) {
	if ev.Worker == "" {
		return
	}
	e.mu.Lock()
	subs := make(map[chan engine.Event]<-chan struct{}, len(e.subs))
	for ch, done := range e.subs {
		subs[ch] = done
	}
	e.mu.Unlock()
	for ch, done := range subs {
		select {
		case ch <- ev:
		case <-done:
		case <-e.stop:
			return
		}
	}
}

// notify wakes every waitFor.
func (e *Engine) notify() {
	e.mu.Lock()
	close(e.changed)
	e.changed = make(chan struct{})
	e.mu.Unlock()
}
