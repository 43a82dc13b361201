package worker

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
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
	// CredentialHosts are the adopted worker's CREDENTIAL_HOSTS: a
	// gateway credential may be for some workers only.
	CredentialHosts []string
}

// adopter takes an adopt document for this wrapper: it checks it, and
// records the worker the wrapper is to become.
type adopter struct {
	log         *slog.Logger
	redisURL    string // the wrapper's own
	redisSocket string
	workerID    string

	// stopLoop ends the task loop (set by Run); adoption is the worker
	// an adopt document made this wrapper become. Set by the task loop's
	// goroutine, read by Run's caller.
	stopLoop atomic.Pointer[context.CancelFunc]
	adoption atomic.Pointer[Adoption]
}

// loginTries bounds the logins an adopt document's user is tried with.
const loginTries = 5

// adopt handles an adopt document read from the input, the worker idle
// (the task loop reads it; its caller acknowledges the entry). It is
// taken only when the wrapper logs in to Redis as a per-worker user of
// its own, the document names the user of its worker_id in the same form
// (another worker's, never this one's), and the wrapper can log in as
// that user with its own password: only a worker-manager, which made that
// user with this password, can have sent it. Then the task loop ends. A
// document it cannot act on is logged, and the worker goes on as it was.
func (a *adopter) adopt(ctx context.Context, data []byte) {
	doc, err := protocol.DecodeAdopt(data)
	if err != nil {
		a.log.Warn("adopt document refused", "err", err)
		return
	}
	url, err := adoptedURL(a.redisURL, a.workerID, doc)
	for try := 1; err == nil; try++ {
		// A few tries: the login may fail for a moment (Redis restarted
		// and its users not made again yet, the gateway switching to a
		// new primary).
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		err = rdb.CanLogIn(cctx, url, a.redisSocket)
		cancel()
		if err == nil || try == loginTries || ctx.Err() != nil {
			break
		}
		err = nil
		sleepCtx(ctx, 500*time.Millisecond)
	}
	if err != nil {
		a.log.Warn("adopt refused", "worker_id", doc.WorkerID, "err", err)
		return
	}
	a.log.Info("adopted: this container now serves a woken worker", "worker_id", doc.WorkerID)
	a.adoption.Store(&Adoption{WorkerID: doc.WorkerID, RedisURL: url, CredentialHosts: doc.CredentialHosts})
	if stop := a.stopLoop.Load(); stop != nil {
		(*stop)()
	}
}

// adoptedURL is the wrapper's Redis URL with the user a names (the
// password stays), when the wrapper's own user is a per-worker one
// (<prefix><self>) and a names <prefix><a.WorkerID>, another worker's.
func adoptedURL(raw, self string, a protocol.Adopt) (string, error) {
	u, err := protocol.ParseRedisURL(raw)
	if err != nil {
		return "", fmt.Errorf("REDIS_URL does not parse")
	}
	prefix, own := strings.CutSuffix(u.Username, self)
	switch {
	case !own || prefix == "":
		return "", fmt.Errorf("this wrapper logs in as no Redis user of its own: no worker can take its container")
	case a.WorkerID == self || a.RedisUser != prefix+a.WorkerID:
		return "", fmt.Errorf("the document names user %q for worker %s, not %q", a.RedisUser, a.WorkerID, prefix+a.WorkerID)
	}
	return u.WithUser(a.RedisUser, u.Password).String(), nil
}

// AdoptedEnviron is environ with the identity of a: its WORKER_ID,
// REDIS_URL and CREDENTIAL_HOSTS replaced, everything else (the spec's
// settings, the sockets, the model token) kept, but AGENT_PREWARM: the
// task that woke the adopted worker waits, and a prewarm would start the
// agent before reading it.
func AdoptedEnviron(environ []string, a *Adoption) []string {
	out := make([]string, 0, len(environ)+1)
	for _, kv := range environ {
		switch {
		case strings.HasPrefix(kv, "WORKER_ID="), strings.HasPrefix(kv, "REDIS_URL="), strings.HasPrefix(kv, "AGENT_PREWARM="),
			strings.HasPrefix(kv, "CREDENTIAL_HOSTS="):
			continue
		}
		out = append(out, kv)
	}
	out = append(out, "WORKER_ID="+a.WorkerID, "REDIS_URL="+a.RedisURL)
	if len(a.CredentialHosts) > 0 {
		out = append(out, "CREDENTIAL_HOSTS="+strings.Join(a.CredentialHosts, ","))
	}
	return out
}
