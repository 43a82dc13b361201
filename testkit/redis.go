package testkit

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
)

// Client returns a go-redis client of the server (with its password), closed
// when the test ends.
func (r *Redis) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: r.Addr, Password: r.Password})
	t.Cleanup(func() { c.Close() })
	return c
}

// StartRedisClient starts a redis-server for the test (StartRedis) and
// returns it with a client of it.
func StartRedisClient(t testing.TB) (*Redis, *redis.Client) {
	t.Helper()
	r := StartRedis(t)
	return r, r.Client(t)
}

// NewRedisClient is StartRedisClient for tests that need the client only.
func NewRedisClient(t testing.TB) *redis.Client {
	t.Helper()
	_, c := StartRedisClient(t)
	return c
}

// XAdd appends an encoded protocol document to a stream as its entry
// fields (protocol.Values), and fails the test when Redis refuses it.
func XAdd(t testing.TB, rc redis.Cmdable, stream string, doc []byte) {
	t.Helper()
	if err := rc.XAdd(context.Background(), &redis.XAddArgs{Stream: stream, Values: protocol.Values(doc)}).Err(); err != nil {
		t.Fatal(err)
	}
}

// Doc encodes a protocol document; an encoding error is a bug of the test,
// so it panics.
func Doc(v interface{ Encode() ([]byte, error) }) []byte {
	doc, err := v.Encode()
	if err != nil {
		panic(err)
	}
	return doc
}
