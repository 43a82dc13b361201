package rdb

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// Heartbeats is what the heartbeater calls: the key written with its TTL
// each beat, and read back for a degraded worker's health check.
type Heartbeats interface {
	SetEx(ctx context.Context, key string, value []byte, ttl time.Duration) error
	Get(ctx context.Context, key string) ([]byte, error)
}

// heartbeatCmds implements Heartbeats over the shared connection.
type heartbeatCmds struct{ *core }

var _ Heartbeats = (*heartbeatCmds)(nil)

// Get returns a string key's value (nil when there is none).
func (r *heartbeatCmds) Get(ctx context.Context, key string) ([]byte, error) {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	b, err := r.c.Get(ctx, key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	return b, err
}

// SetEx sets a key with a TTL.
func (r *heartbeatCmds) SetEx(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	return r.c.Set(ctx, key, value, ttl).Err()
}
