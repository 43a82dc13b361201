package rdb

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/spawner/internal/ctlplane"
)

// Leases are string keys whose value is the holder's id and whose TTL is
// the lease's expiry. TakeLease (which renews a lease its caller holds)
// and ReleaseLease are safe to retry: each compares the holder before it
// writes.
type Leases interface {
	TakeLease(ctx context.Context, name, owner string, ttl time.Duration) (bool, error)
	ReleaseLease(ctx context.Context, name, owner string) error
	LeaseHolder(ctx context.Context, name string) (string, error)
}

// leaseCmds implements Leases over the shared connection.
type leaseCmds struct{ *core }

var _ Leases = (*leaseCmds)(nil)

var takeScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v == false then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
`)

var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)

// TakeLease takes the named lease for owner, or renews it when owner
// holds it already, and reports whether owner holds it now.
func (r *leaseCmds) TakeLease(ctx context.Context, name, owner string, ttl time.Duration) (bool, error) {
	n, err := takeScript.Run(ctx, r.c, []string{ctlplane.LeaseKey(r.Keys, name)}, owner, ttl.Milliseconds()).Int()
	return n == 1, err
}

// ReleaseLease gives the named lease up if owner holds it.
func (r *leaseCmds) ReleaseLease(ctx context.Context, name, owner string) error {
	return releaseScript.Run(ctx, r.c, []string{ctlplane.LeaseKey(r.Keys, name)}, owner).Err()
}

// LeaseHolder returns who holds the named lease ("" when nobody).
func (r *leaseCmds) LeaseHolder(ctx context.Context, name string) (string, error) {
	v, err := r.c.Get(ctx, ctlplane.LeaseKey(r.Keys, name)).Result()
	if Nil(err) {
		return "", nil
	}
	return v, err
}
