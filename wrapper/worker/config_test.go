package worker

import (
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

// REDIS_URL takes the four forms of protocol.ParseRedisURL; a bad one is
// refused with the variable's name and without its password; WAIT's
// policy follows the URL's kind unless REDIS_WAIT_* say.
func TestConfigRedisURL(t *testing.T) {
	base := map[string]string{"WORKER_ID": "w-1", "AGENT_TYPE": "claude"}
	tests := []struct {
		name, url, replicas, timeout string
		want                         protocol.WaitPolicy
		bad                          string
	}{
		{name: "plain", url: "redis://:pw@127.0.0.1:6379/0", want: protocol.WaitPolicy{Timeout: protocol.DefaultRedisWaitTimeout}},
		{name: "TLS", url: "rediss://u:pw@redis.example:6380/1", want: protocol.WaitPolicy{Timeout: protocol.DefaultRedisWaitTimeout}},
		{name: "sentinel", url: "redis+sentinel://agentvisor%3Aworker%3Aw-1:pw@127.0.0.1:26379,127.0.0.1:26380/main/0?sentinel_password=sp",
			want: protocol.WaitPolicy{Replicas: 1, Timeout: protocol.DefaultRedisWaitTimeout}},
		{name: "sentinel, WAIT off", url: "rediss+sentinel://h:1/main", replicas: "0", want: protocol.WaitPolicy{Timeout: protocol.DefaultRedisWaitTimeout}},
		{name: "sentinel, WAIT tuned", url: "redis+sentinel://h:1/main", replicas: "2", timeout: "300ms", want: protocol.WaitPolicy{Replicas: 2, Timeout: 300 * time.Millisecond}},
		{name: "missing", url: "", bad: "config: REDIS_URL: required"},
		{name: "other scheme", url: "http://:s3cret@h:1/0", bad: "config: REDIS_URL: protocol: bad redis URL: unknown scheme"},
		{name: "sentinel without master", url: "redis+sentinel://:s3cret@h:1", bad: "config: REDIS_URL: protocol: bad redis URL: a sentinel URL needs the master's name"},
		{name: "bad WAIT", url: "redis+sentinel://h:1/main", replicas: "many", bad: "config: REDIS_WAIT_REPLICAS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := map[string]string{"REDIS_URL": tt.url, "REDIS_WAIT_REPLICAS": tt.replicas, "REDIS_WAIT_TIMEOUT": tt.timeout}
			for k, v := range base {
				env[k] = v
			}
			cfg, err := FromEnv(mapEnv(env))
			if tt.bad != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tt.bad) || strings.Contains(err.Error(), "s3cret") {
					t.Fatalf("got %v; want an error beginning %q, no password", err, tt.bad)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.RedisWait != tt.want {
				t.Fatalf("WAIT policy %+v, want %+v", cfg.RedisWait, tt.want)
			}
		})
	}
}

// The Redis passwords of a sentinel URL, the sentinels' too, are
// redacted from what leaves the wrapper.
func TestRedactorSentinelURL(t *testing.T) {
	r := NewRedactor(nil, "redis+sentinel://agentvisor%3Aw%3A1:pa%40ss123@h:1,h:2/m/0?sentinel_password=sent%26inel")
	for _, s := range []string{"pa@ss123", "pa%40ss123", "sent&inel", "sent%26inel"} {
		if got := r.Redact("x " + s + " y"); strings.Contains(got, s) {
			t.Errorf("Redact kept %q: %q", s, got)
		}
	}
}
