package spawner

import (
	"errors"
	"strings"
	"testing"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/redisconn"
)

// Sealed workers take a sentinel WORKER_REDIS_URL: their gateway follows
// the primary, and their own URL is a plain one naming the master as
// host, with the data user's credentials and db and no sentinel's, which
// the wrapper's ThroughSocket takes. WAIT keeps a sentinel URL's default.
func TestConfigSealedSentinel(t *testing.T) {
	for _, tc := range []struct {
		name, url, wait, want, wantWait string
	}{
		{name: "sentinel", url: "redis+sentinel://u:p%40ss@10.0.0.1:26379,10.0.0.2/agentvisor/2?sentinel_password=spw",
			want: "redis://u:p%40ss@agentvisor:6379/2", wantWait: "1"},
		{name: "TLS", url: "rediss+sentinel://:pw@s1/redis-main.example.test",
			want: "rediss://:pw@redis-main.example.test:6379/0", wantWait: "1"},
		{name: "WAIT as given", url: "redis+sentinel://s1/m", wait: "0", want: "redis://m:6379/0", wantWait: "0"},
		{name: "plain stays", url: "redis://:pw@10.0.0.1:6379/0", want: "redis://:pw@10.0.0.1:6379/0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"REDIS_URL": "redis://127.0.0.1:1/0", "WORKER_REDIS_URL": tc.url, "WORKER_NETWORK_MODE": NetworkSealed, "REDIS_WAIT_REPLICAS": tc.wait}
			c, err := ConfigFromEnv(func(k string) string { return env[k] })
			if err != nil {
				t.Fatal(err)
			}
			if c.RedisURLForWorkers != tc.want || c.RedisWait.Replicas != tc.wantWait {
				t.Fatalf("the workers' URL %q, REDIS_WAIT_REPLICAS %q; want %q, %q", c.RedisURLForWorkers, c.RedisWait.Replicas, tc.want, tc.wantWait)
			}
			o, err := redisconn.Options(c.RedisURLForWorkers)
			if err != nil {
				t.Fatal(err)
			}
			if err := redisconn.ThroughSocket(o, "/gateway/redis.sock"); err != nil {
				t.Fatalf("the wrapper refuses the sealed URL: %v", err)
			}
		})
	}
	// Not sealed, the workers get the sentinel URL as it is.
	url := "redis+sentinel://s1/m/0"
	env := map[string]string{"REDIS_URL": url, "WORKER_NETWORK_MODE": "host"}
	if c, err := ConfigFromEnv(func(k string) string { return env[k] }); err != nil || c.RedisURLForWorkers != url || c.RedisWait.Replicas != "" {
		t.Fatalf("host network: %q %q %v", c.RedisURLForWorkers, c.RedisWait.Replicas, err)
	}
	// A master's name that cannot be a host (a:b, a%2Fb) is refused, naming the
	// variable, with a stable error.
	for _, url := range []string{"redis+sentinel://s1/a:b", "redis+sentinel://s1/a%2Fb"} {
		if _, err := protocol.ParseRedisURL(url); err != nil {
			t.Fatalf("the sentinel URL %s itself parses: %v", url, err)
		}
		env = map[string]string{"REDIS_URL": url, "WORKER_NETWORK_MODE": NetworkSealed}
		_, err := ConfigFromEnv(func(k string) string { return env[k] })
		if !errors.Is(err, ErrSealedMasterName) || !strings.Contains(err.Error(), "WORKER_REDIS_URL") {
			t.Fatalf("%s: %v", url, err)
		}
	}
}

// WORKER_RUNTIME takes runc or gvisor, and gvisor only for sealed
// workers; the errors name the variable.
func TestConfigWorkerRuntime(t *testing.T) {
	for _, tc := range []struct {
		name, runtime, network string
		want                   protocol.Runtime
		wantErr                error
	}{
		{name: "default", want: protocol.RuntimeRunc},
		{name: "gvisor sealed", runtime: "gvisor", want: protocol.RuntimeGVisor},
		{name: "gvisor on the host's network", runtime: "gvisor", network: "host", wantErr: ErrGVisorUnsealed},
		{name: "unknown", runtime: "kata"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"REDIS_URL": "redis://127.0.0.1:1/0", "WORKER_RUNTIME": tc.runtime, "WORKER_NETWORK_MODE": tc.network}
			c, err := ConfigFromEnv(func(k string) string { return env[k] })
			if tc.want == "" {
				if err == nil || !strings.Contains(err.Error(), "WORKER_RUNTIME") || (tc.wantErr != nil && !errors.Is(err, tc.wantErr)) {
					t.Fatalf("WORKER_RUNTIME=%s WORKER_NETWORK_MODE=%s: %v, want an error naming WORKER_RUNTIME", tc.runtime, tc.network, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Runtime != tc.want || c.GVisorRuntime != "runsc" {
				t.Fatalf("runtime %q (%q), want %q (runsc)", c.Runtime, c.GVisorRuntime, tc.want)
			}
		})
	}
}
