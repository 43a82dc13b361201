package worker

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/wrapper/internal/rdb"
)

// Adoption is the worker this wrapper becomes: a worker-manager woke a
// hibernated worker in this warm pool worker's container (an adopt
// document on the input). Run returns once the worker has stopped as
// itself; the caller re-executes the wrapper with AdoptedEnviron.
type Adoption struct {
	WorkerID string
	RedisURL string // the Redis URL with the adopted worker's user, and this wrapper's password
}

// Adopted returns the worker this wrapper is to become, nil when none.
func (w *Worker) Adopted() *Adoption { return w.adoption.Load() }

// adopt handles an adopt document read from the input, the worker idle
// (the task loop reads it). It checks that the wrapper may log in as the
// named Redis user with its own password (only a worker-manager that
// gave that user this password can have sent it), acknowledges the
// entry, and ends the task loop; a document it cannot act on is logged
// and acknowledged, and the worker goes on as it was.
func (w *Worker) adopt(ctx context.Context, src taskSource, data []byte) {
	defer w.pub.ack(src)
	a, err := protocol.DecodeAdopt(data)
	if err != nil {
		w.log.Warn("adopt document refused", "err", err)
		return
	}
	url, err := adoptedURL(w.cfg.RedisURL, a.RedisUser)
	if err == nil {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = rdb.CanLogIn(cctx, url, w.cfg.RedisSocket)
		cancel()
	}
	if err != nil {
		w.log.Warn("adopt refused: the wrapper cannot log in as the worker to become", "worker_id", a.WorkerID, "err", err)
		return
	}
	w.log.Info("adopted: this container now serves a woken worker", "worker_id", a.WorkerID)
	w.adoption.Store(&Adoption{WorkerID: a.WorkerID, RedisURL: url})
	if stop := w.stopLoop.Load(); stop != nil {
		(*stop)()
	}
}

// adoptedURL is the wrapper's Redis URL with user as its user (the
// password stays); the URL as it is when user is empty (no per-worker
// users: every worker logs in alike).
func adoptedURL(raw, user string) (string, error) {
	if user == "" {
		return raw, nil
	}
	u, err := protocol.ParseRedisURL(raw)
	if err != nil {
		return "", fmt.Errorf("REDIS_URL does not parse")
	}
	return u.WithUser(user, u.Password).String(), nil
}

// AdoptedEnviron is environ with the identity of a: its WORKER_ID and
// REDIS_URL replaced, everything else (the spec's settings, the sockets,
// the model token) kept, but AGENT_PREWARM: the task that woke the
// adopted worker waits, and a prewarm would start the agent before
// reading it.
func AdoptedEnviron(environ []string, a *Adoption) []string {
	out := make([]string, 0, len(environ))
	for _, kv := range environ {
		switch {
		case strings.HasPrefix(kv, "WORKER_ID="), strings.HasPrefix(kv, "REDIS_URL="), strings.HasPrefix(kv, "AGENT_PREWARM="):
			continue
		}
		out = append(out, kv)
	}
	return append(out, "WORKER_ID="+a.WorkerID, "REDIS_URL="+a.RedisURL)
}
