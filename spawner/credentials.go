package spawner

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sync"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/internal/rdb"
)

// Worker credentials. With ACLs (Redis 6+, WORKER_REDIS_ACL auto or on),
// each worker connects as a Redis user of its own, made at create and
// deleted at retirement, whose rules (rdb.WorkerACL) allow only the
// commands the wrapper runs on its own keys and the shared ones its kind
// needs: the manager's credentials never enter a container. Without ACLs
// (an old Redis, or WORKER_REDIS_ACL=off) every worker gets
// WORKER_REDIS_URL as it is: the less safe mode, logged once at start.

// workerUsers makes and deletes the workers' Redis users, and decides
// once whether there are any (ACL mode).
type workerUsers struct {
	store     rdb.ACL
	log       *slog.Logger
	mode      string // WORKER_REDIS_ACL: auto, on, off
	workerURL string // WORKER_REDIS_URL: what workers connect with

	aclOnce sync.Once // decides acl and aclErr, once
	acl     bool      // workers get Redis users of their own
	aclErr  error
}

func newWorkerUsers(store rdb.ACL, log *slog.Logger, mode, workerURL string) *workerUsers {
	return &workerUsers{store: store, log: log, mode: mode, workerURL: workerURL}
}

// aclMode says whether workers get users of their own; decided once.
func (s *workerUsers) aclMode(ctx context.Context) bool {
	s.aclOnce.Do(func() {
		switch s.mode {
		case "off":
			s.log.Warn("WORKER_REDIS_ACL=off: every worker connects with WORKER_REDIS_URL's credentials (less safe: an agent could reach every key)")
			return
		}
		ok, err := s.store.ACLSupported(ctx)
		switch {
		case ok:
			s.acl = true
			s.log.Info("workers connect to Redis as users of their own (ACL)")
		case s.mode == "on":
			s.aclErr = fmt.Errorf("WORKER_REDIS_ACL=on but this Redis has no usable ACL: %v", err)
		default:
			s.log.Warn("this Redis has no ACL the manager may use: every worker connects with WORKER_REDIS_URL's credentials (less safe: an agent could reach every key)", "err", err)
		}
	})
	return s.acl
}

// redisURL makes a worker's Redis user (in ACL mode) and returns
// the URL its wrapper connects with.
func (s *workerUsers) redisURL(ctx context.Context, id string, spec protocol.WorkerSpec) (string, error) {
	acl := s.aclMode(ctx)
	if s.aclErr != nil {
		return "", &Error{Code: protocol.CodeUpstreamUnavailable, Err: s.aclErr}
	}
	if !acl {
		return s.workerURL, nil
	}
	u, err := protocol.ParseRedisURL(s.workerURL)
	if err != nil {
		return "", errorf(protocol.CodeInternalError, "WORKER_REDIS_URL does not parse")
	}
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	password := hex.EncodeToString(b)
	if err := s.store.SetWorkerUser(ctx, id, password, rdb.ScopeOf(spec)); err != nil {
		return "", redisError(err, "Redis user of %s", id)
	}
	// The worker's user authenticates to the primary; a sentinel URL
	// keeps the sentinels' own credentials (sentinel_password), which the
	// deployment gives workers on purpose (SECURITY.md).
	return u.WithUser(s.store.WorkerUser(id), password).String(), nil
}

// drop deletes a worker's Redis user (ACL mode).
func (s *workerUsers) drop(ctx context.Context, id string) error {
	if !s.aclMode(ctx) {
		return nil
	}
	if err := s.store.DeleteWorkerUser(ctx, id); err != nil {
		return redisError(err, "delete the Redis user of %s", id)
	}
	return nil
}

// RedactURL returns a Redis URL with its passwords replaced, for logs
// (protocol.RedactRedisURL: a URL that does not parse is not shown).
func RedactURL(raw string) string { return protocol.RedactRedisURL(raw) }

// RedisConnected tells the spawner that its Redis client opened a new
// connection (go-redis's OnConnect; the worker-manager sets it). After a
// failover or a restart the server it reaches may lack the worker users
// (ACL users are neither replicated nor in the append-only file): the
// leader makes them again at its next health check (a quarter of a
// heartbeat interval) instead of at its periodic one, so that workers
// authenticate again within a heartbeat interval. Signals coalesce; it
// never blocks.
func (s *Spawner) RedisConnected() {
	select {
	case s.connected <- struct{}{}:
	default:
	}
}

// restore makes again the worker users Redis lost (ACL mode).
func (s *workerUsers) restore(ctx context.Context) (int, error) {
	if !s.aclMode(ctx) {
		return 0, nil
	}
	return s.store.RestoreWorkerUsers(ctx)
}
