package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
)

// presence reads whether any worker-manager is alive: each running
// manager keeps a state hash under a TTL and its id in a set
// (Keys.Managers, Keys.ManagerState); a member without a hash is gone.
type presence struct {
	c    redis.Cmdable
	keys protocol.Keys
}

// alive reports whether at least one manager's state hash exists.
func (p presence) alive(ctx context.Context) (bool, error) {
	ids, err := p.c.SMembers(ctx, p.keys.Managers()).Result()
	if err != nil || len(ids) == 0 {
		return false, err
	}
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = p.keys.ManagerState(id)
	}
	n, err := p.c.Exists(ctx, keys...).Result()
	return n > 0, err
}

// presenceGrace is how long check looks again before it answers that no
// manager is alive: a manager started a moment before (a script that
// starts it, then sends) writes its state within it.
const presenceGrace = 2 * time.Second

// check fails NO_MANAGER when no manager is alive, looking again for
// presenceGrace. A user that may not read the managers' keys (a narrower
// ACL than the documented consumer's) is not refused for it: Do then
// relies on the command's deadline alone.
func (p presence) check(ctx context.Context) error {
	ok, err := p.alive(ctx)
	for until := time.Now().Add(presenceGrace); err == nil && !ok && time.Now().Before(until); {
		select {
		case <-ctx.Done():
			return redisError(ctx.Err(), "read the managers' presence")
		case <-time.After(200 * time.Millisecond):
		}
		ok, err = p.alive(ctx)
	}
	switch {
	case redis.IsPermissionError(err):
		return nil
	case err != nil:
		return redisError(err, "read the managers' presence")
	case !ok:
		return &Error{Code: protocol.CodeNoManager, Err: fmt.Errorf("%w: the command was not sent", errNoManager(p.keys))}
	}
	return nil
}

// ErrNoManager is what the error of a Do matches (errors.Is) when no
// worker-manager was alive to carry out its command (code NO_MANAGER).
var ErrNoManager = errors.New("client: no worker-manager is alive")

// IsNoManager reports whether err is a Do that found no manager alive.
func IsNoManager(err error) bool { return errors.Is(err, ErrNoManager) }

// errNoManager names where no manager was found.
func errNoManager(keys protocol.Keys) error {
	return fmt.Errorf("%w on this Redis with key prefix %q (start worker-manager, or check REDIS_URL and WORKER_KEY_PREFIX)", ErrNoManager, keys.Prefix)
}
