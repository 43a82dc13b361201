package worker

import (
	"flag"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/envconf"
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

// wrapperVars is the wrapper's table of variables.
func wrapperVars() []envconf.Var {
	var s1, s2 string
	return configVars(&Config{}, &protocol.RedisURL{}, &s1, &s2)
}

// update rewrites the tables of docs/configuration.md from the code
// (make config-docs) instead of failing when they differ.
var update = flag.Bool("update", false, "rewrite the worker-wrapper's table of docs/configuration.md from the code")

// The worker-wrapper's section of docs/configuration.md is its table
// of variables, rendered from the code (envconf.Markdown): a variable
// added, removed, or with another default or Doc, fails until the
// section is regenerated.
func TestConfigTables(t *testing.T) {
	const path = "../../docs/configuration.md"
	diff, err := envconf.SyncFile(path, "worker-wrapper", wrapperVars(), *update)
	switch {
	case err != nil:
		t.Fatal(err)
	case diff != "" && *update:
		t.Logf("rewrote the worker-wrapper's table of %s:\n%s", path, diff)
	case diff != "":
		t.Errorf("the worker-wrapper's table of %s is not the code's; regenerate it with `make config-docs` "+
			"(or `go test -run TestConfigTables ./worker -update` in wrapper/). - the file's, + the code's:\n%s", path, diff)
	}
}

// Unset variables take the table's defaults; these are the values the
// wrapper has always had.
func TestConfigDefaults(t *testing.T) {
	c, err := FromEnv(mapEnv(map[string]string{"WORKER_ID": "w1", "REDIS_URL": "redis://127.0.0.1:1/0", "AGENT_TYPE": "droid"}))
	if err != nil {
		t.Fatal(err)
	}
	if allowed, _ := protocol.ParseAllowedCommandsEnv(""); !reflect.DeepEqual(c.AllowedCommands, allowed) || !reflect.DeepEqual(c.Prices, protocol.DefaultModelPrices()) {
		t.Fatalf("ALLOWED_COMMANDS %+v, prices %v", c.AllowedCommands, c.Prices)
	}
	c.AllowedCommands, c.Prices = protocol.AllowedCommands{}, nil
	want := Config{WorkerID: "w1", RedisURL: "redis://127.0.0.1:1/0", RedisWait: protocol.WaitPolicy{Timeout: protocol.DefaultRedisWaitTimeout},
		Keys: protocol.Keys{Prefix: "worker"}, AgentType: protocol.AgentDroid, Kind: protocol.KindLongLived, AgentBin: "droid", SkipPermissions: true,
		Workspace: "/workspace", TaskTimeout: 600 * time.Second, StallTimeout: 5 * time.Minute, Retry: protocol.DefaultRetryPolicy(), RecycleTasks: 100, RecycleRSS: 1024 << 20,
		ApprovalTimeout: 5 * time.Minute, HeartbeatInterval: 10 * time.Second, DegradedCooldown: time.Minute, ShutdownGrace: 20 * time.Second, ResultGrace: 3 * time.Second,
		KillGrace: 5 * time.Second, ProgressAddr: "127.0.0.1:0", EventBuffer: 1000, PauseAfterOutput: true, StreamMaxLen: 10000,
		RunRetention: 24 * time.Hour, SessionPolicy: "project", MCPTimeout: 30 * time.Second,
		Sessions:     SessionConfig{ContextThreshold: 150000, StaleAfter: 24 * time.Hour, Affinity: 30 * time.Minute, Summarize: true},
		SessionStore: "redis", SessionStoreMax: 8 << 20}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("defaults\n%+v\nwant\n%+v", c, want)
	}
}

// Every boolean of the wrapper takes the same spellings, those
// strconv.ParseBool took (t, F, TRUE, ...) and yes/no, on/off; a value
// that is no boolean is an error naming its variable.
func TestConfigBooleans(t *testing.T) {
	names := []string{"AGENT_SKIP_PERMISSIONS", "AGENT_APPROVAL", "PAUSE_AFTER_OUTPUT", "SESSION_SUMMARIZE"}
	for _, spelling := range []struct {
		s    string
		want bool
	}{{"1", true}, {"t", true}, {"TRUE", true}, {"yes", true}, {"On", true}, {"0", false}, {"F", false}, {"False", false}, {"no", false}, {"OFF", false}} {
		env := map[string]string{"WORKER_ID": "w1", "REDIS_URL": "redis://127.0.0.1:1/0", "AGENT_TYPE": "droid"}
		for _, n := range names {
			env[n] = spelling.s
		}
		c, err := FromEnv(mapEnv(env))
		if err != nil {
			t.Fatalf("%q: %v", spelling.s, err)
		}
		for i, got := range []bool{c.SkipPermissions, c.Approval, c.PauseAfterOutput, c.Sessions.Summarize} {
			if got != spelling.want {
				t.Errorf("%s=%s: %v", names[i], spelling.s, got)
			}
		}
	}
	for _, n := range append(names, "AGENT_PTY", "AGENT_PERSISTENT", "AGENT_PREWARM", "AGENT_JSON_SCHEMA") {
		env := map[string]string{"WORKER_ID": "w1", "REDIS_URL": "redis://127.0.0.1:1/0", "AGENT_TYPE": "claude", n: "maybe"}
		if _, err := FromEnv(mapEnv(env)); err == nil || !strings.HasPrefix(err.Error(), "config: "+n+": want a boolean") {
			t.Errorf("%s=maybe: %v", n, err)
		}
	}
}
