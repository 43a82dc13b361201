package main

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/agentvisor/agentvisor/redisconn"
	"github.com/agentvisor/agentvisor/testkit"
)

// The manager warns at start when its Redis lets anyone in without a
// password, and says nothing when it does not.
func TestWarnsWhenRedisIsOpen(t *testing.T) {
	for _, tc := range []struct {
		name     string
		password string
		warn     bool
	}{{"no password", "", true}, {"password", "s3cret-pw", false}} {
		t.Run(tc.name, func(t *testing.T) {
			r := testkit.StartRedisWith(t, testkit.RedisOptions{Password: tc.password})
			opt, err := redisconn.Options(r.URL())
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			warnIfOpen(context.Background(), opt, slog.New(slog.NewTextHandler(&buf, nil)))
			got := strings.Contains(buf.String(), "level=WARN") && strings.Contains(buf.String(), "without a password")
			if got != tc.warn {
				t.Errorf("warned = %v, want %v; log: %q", got, tc.warn, buf.String())
			}
		})
	}
}
