package rdb

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/redisconn"
	"github.com/agentvisor/agentvisor/testkit"
)

// OpenToAnyone: a Redis without a password is open even to a client that
// has credentials of its own; one with a password (requirepass) or with
// the default user off is not; an unreachable one is an error.
func TestOpenToAnyone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	check := func(url string) (bool, error) {
		t.Helper()
		opt, err := redisconn.Options(url)
		if err != nil {
			t.Fatal(err)
		}
		return OpenToAnyone(ctx, opt)
	}

	open := testkit.StartRedis(t)
	if got, err := check(open.URL()); err != nil || !got {
		t.Errorf("password-less Redis: open = %v, %v; want true", got, err)
	}

	closed := testkit.StartRedisWith(t, testkit.RedisOptions{Password: "s3cret-pw"})
	if got, err := check(closed.URL()); err != nil || got {
		t.Errorf("Redis with requirepass: open = %v, %v; want false", got, err)
	}

	// The set-up's way (scripts/redis.sh): the default user off, a named
	// user of its own.
	acl := testkit.StartRedis(t)
	if _, err := acl.Do("ACL", "SETUSER", "manager", "on", ">mgr-pw", "~*", "&*", "+@all"); err != nil {
		t.Fatal(err)
	}
	if _, err := acl.Do("ACL", "SETUSER", "default", "off"); err != nil {
		t.Fatal(err)
	}
	if got, err := check("redis://manager:mgr-pw@" + acl.Addr + "/0"); err != nil || got {
		t.Errorf("Redis with the default user off: open = %v, %v; want false", got, err)
	}

	port, err := testkit.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := check("redis://127.0.0.1:" + strconv.Itoa(port) + "/0"); err == nil {
		t.Errorf("nothing listening: open = %v, no error; want an error", got)
	}
}
