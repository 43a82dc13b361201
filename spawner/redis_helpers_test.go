package spawner

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/testkit"
)

func newRedis(t *testing.T) *redis.Client {
	t.Helper()
	srv := testkit.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { c.Close() })
	return c
}

func xadd(t *testing.T, rc *redis.Client, stream string, doc []byte) {
	t.Helper()
	if err := rc.XAdd(context.Background(), &redis.XAddArgs{Stream: stream, Values: protocol.Values(doc)}).Err(); err != nil {
		t.Fatal(err)
	}
}

func docOf(v interface{ Encode() ([]byte, error) }) []byte {
	doc, err := v.Encode()
	if err != nil {
		panic(err)
	}
	return doc
}
