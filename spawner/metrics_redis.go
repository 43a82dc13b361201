package spawner

import (
	"context"
	"errors"
	"net"
	"strings"

	"github.com/redis/go-redis/v9"
)

// RedisHook counts the failed commands of a go-redis client (add it with
// AddHook to the manager's client).
func (m *Metrics) RedisHook() redis.Hook { return redisHook{m} }

type redisHook struct{ m *Metrics }

func (h redisHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err != nil && ctx.Err() == nil {
			h.m.redisErrors.WithLabelValues("dial").Inc()
		}
		return c, err
	}
}

func (h redisHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.count(ctx, cmd, err)
		return err
	}
}

func (h redisHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			h.count(ctx, c, c.Err())
		}
		return err
	}
}

func (h redisHook) count(ctx context.Context, cmd redis.Cmder, err error) {
	if err == nil || errors.Is(err, redis.Nil) || ctx.Err() != nil {
		return
	}
	// Command names are the client's own: a bounded set.
	h.m.redisErrors.WithLabelValues(strings.ToLower(cmd.Name())).Inc()
}
