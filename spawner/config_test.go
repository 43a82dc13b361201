package spawner

import (
	"errors"
	"flag"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/spawner/images"

	"github.com/docker/go-units"

	"github.com/agentvisor/agentvisor/envconf"
	"github.com/agentvisor/agentvisor/protocol"
)

// MODEL_PRICES is the manager's: checked at start (an error names the
// variable, the model and the field), passed to every worker as given,
// and neither WORKER_ENV nor a spec's env may set it.
func TestModelPricesConfig(t *testing.T) {
	env := func(m map[string]string) func(string) string {
		return func(k string) string {
			if k == "REDIS_URL" {
				return "redis://127.0.0.1:1/0"
			}
			return m[k]
		}
	}
	prices := `{"agentvisor": {"input": 3, "output": 15, "cache_read": 0.3, "cache_write": 3.75}}`
	c, err := ConfigFromEnv(env(map[string]string{"MODEL_PRICES": prices}))
	if err != nil {
		t.Fatal(err)
	}
	s := New(c, nil, nil, nil, nil)
	if got := s.inst.workerEnv("w1", protocol.WorkerSpec{AgentType: protocol.AgentDroid}, "redis://x"); !slices.Contains(got, "MODEL_PRICES="+prices) {
		t.Fatalf("worker env %v lacks MODEL_PRICES", got)
	}
	if c, err := ConfigFromEnv(env(nil)); err != nil || slices.ContainsFunc(New(c, nil, nil, nil, nil).inst.workerEnv("w1", protocol.WorkerSpec{}, "redis://x"),
		func(v string) bool { return strings.HasPrefix(v, "MODEL_PRICES=") }) {
		t.Fatalf("without MODEL_PRICES: %v", err)
	}
	_, err = ConfigFromEnv(env(map[string]string{"MODEL_PRICES": `{"agentvisor": {"input": 3, "output": 15}}`}))
	if err == nil || !errors.Is(err, protocol.ErrModelPrices) || !strings.Contains(err.Error(), `config: MODEL_PRICES: `) ||
		!strings.Contains(err.Error(), `model "agentvisor": cache_read: required`) {
		t.Fatalf("a price left out: %v", err)
	}
	if _, err := ConfigFromEnv(env(map[string]string{"WORKER_ENV": `{"MODEL_PRICES": "{}"}`})); err == nil || !strings.Contains(err.Error(), "WORKER_ENV: MODEL_PRICES is a variable of the manager's own environment") {
		t.Fatalf("MODEL_PRICES in WORKER_ENV: %v", err)
	}
	if !protocol.ReservedEnv("MODEL_PRICES") {
		t.Fatal("a spec's env may set MODEL_PRICES")
	}
}

// update rewrites the tables of docs/configuration.md from the code
// (make config-docs) instead of failing when they differ.
var update = flag.Bool("update", false, "rewrite the worker-manager's table of docs/configuration.md from the code")

// The worker-manager's section of docs/configuration.md is its table
// of variables, rendered from the code (envconf.Markdown): a variable
// added, removed, or with another default or Doc, fails until the
// section is regenerated.
func TestConfigTables(t *testing.T) {
	const path = "../docs/configuration.md"
	diff, err := envconf.SyncFile(path, "worker-manager", managerVars(&Config{}, &OpsConfig{}, &EngineConfig{}), *update)
	switch {
	case err != nil:
		t.Fatal(err)
	case diff != "" && *update:
		t.Logf("rewrote the worker-manager's table of %s:\n%s", path, diff)
	case diff != "":
		t.Errorf("the worker-manager's table of %s is not the code's; regenerate it with `make config-docs` "+
			"(or `go test -run TestConfigTables . -update` in spawner/). - the file's, + the code's:\n%s", path, diff)
	}
}

// Unset variables take the table's defaults; these are the values the
// manager has always had.
func TestConfigDefaults(t *testing.T) {
	c, err := ConfigFromEnv(func(k string) string { return map[string]string{"REDIS_URL": "redis://127.0.0.1:1/0"}[k] })
	if err != nil {
		t.Fatal(err)
	}
	hostname, _ := os.Hostname()
	want := Config{RedisURL: "redis://127.0.0.1:1/0", Keys: protocol.Keys{Prefix: "worker"}, MaxWorkers: 10, CreationTimeout: 5 * time.Minute,
		MemoryLimit: 512 << 20, CPULimit: 0.5, PidsLimit: 512, StopTimeout: 30 * time.Second, NetworkMode: NetworkSealed, GatewayDir: "/run/agentvisor/gateway", SpareNetns: 2, RedisURLForWorkers: "redis://127.0.0.1:1/0",
		Runtime: protocol.RuntimeRunc, GVisorRuntime: "runsc",
		DiskLimit: 10 << 30, DiskDir: "/var/lib/agentvisor/disks",
		PassEnv:     []string{"ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "FACTORY_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL", "DROID_BASE_URL"},
		IdleTimeout: 600 * time.Second, PauseTimeout: 30 * time.Minute, ReplaceDead: true, ReplaceDegradedAfter: 10 * time.Minute, EvictIdleAfter: time.Minute, BaseImage: images.DefaultBaseImage, ProjectBuildTimeout: 10 * time.Minute, ProjectVolumes: true,
		VolumeRetention: 30 * 24 * time.Hour, ManagerID: hostname, HeartbeatInterval: 10 * time.Second, ReconcileInterval: time.Minute,
		CreationGrace: 30 * time.Second, WorkerACL: "auto", LeaseTTL: 15 * time.Second, MaxReplacements: 3, ReplaceBackoff: time.Second,
		Retry:     protocol.DefaultRetryPolicy(),
		Retention: 24 * time.Hour, RunRetention: 24 * time.Hour, StreamMaxLen: 10000, ReplyTTL: time.Hour, HostLabels: map[string]string{}}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("defaults\n%+v\nwant\n%+v", c, want)
	}
	ops, err := OpsConfigFromEnv(func(string) string { return "" })
	if err != nil || ops != (OpsConfig{MetricsAddr: "127.0.0.1:9464", MetricsMaxProjects: 50, GCRetention: 7 * 24 * time.Hour, GCInterval: 24 * time.Hour}) {
		t.Fatalf("ops defaults %+v %v", ops, err)
	}
}

// Every boolean of the manager takes the same spellings: GC_PRUNE_BUILD_CACHE=1
// and WORKER_PROJECT_VOLUMES=no mean what they say, and a value that is
// no boolean is an error naming its variable.
func TestConfigBooleans(t *testing.T) {
	read := func(env map[string]string) (Config, OpsConfig, error) {
		get := func(k string) string {
			if k == "REDIS_URL" {
				return "redis://127.0.0.1:1/0"
			}
			return env[k]
		}
		c, err := ConfigFromEnv(get)
		if err != nil {
			return c, OpsConfig{}, err
		}
		o, err := OpsConfigFromEnv(get)
		return c, o, err
	}
	flags := func(c Config, o OpsConfig) []bool {
		return []bool{c.ProjectVolumes, c.PruneBuildCache, c.ReplaceDead, o.GCDryRun, o.KeepWorkers, o.RemoveVolumesAtStop}
	}
	names := []string{"WORKER_PROJECT_VOLUMES", "GC_PRUNE_BUILD_CACHE", "REPLACE_DEAD_WORKERS", "GC_DRY_RUN", "KEEP_WORKERS", "REMOVE_VOLUMES_AT_STOP"}
	for _, spelling := range []struct {
		s    string
		want bool
	}{{"1", true}, {"true", true}, {"TRUE", true}, {"yes", true}, {"On", true}, {"0", false}, {"false", false}, {"No", false}, {"off", false}} {
		env := map[string]string{}
		for _, n := range names {
			env[n] = spelling.s
		}
		c, o, err := read(env)
		if err != nil {
			t.Fatalf("%q: %v", spelling.s, err)
		}
		for i, got := range flags(c, o) {
			if got != spelling.want {
				t.Errorf("%s=%s: %v", names[i], spelling.s, got)
			}
		}
	}
	for _, n := range names {
		if _, _, err := read(map[string]string{n: "maybe"}); err == nil || !strings.HasPrefix(err.Error(), "config: "+n+": want a boolean") {
			t.Errorf("%s=maybe: %v", n, err)
		}
	}
}

// WORKER_DISK_LIMIT is a size of at least a spec's smallest, or 0 (off)
// for none; anything else stops the manager naming the variable. A spec's
// limits.disk overrides it in the instance, and the wrapper is told.
func TestConfigDiskLimit(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  int64
		bad   bool
	}{{"0", 0, false}, {"off", 0, false}, {"16m", 16 << 20, false}, {"2g", 2 << 30, false}, {"1m", 0, true}, {"lots", 0, true}, {"-1g", 0, true}} {
		c, err := ConfigFromEnv(func(k string) string {
			return map[string]string{"REDIS_URL": "redis://127.0.0.1:1/0", "WORKER_DISK_LIMIT": tc.value}[k]
		})
		if tc.bad {
			if err == nil || !strings.Contains(err.Error(), "WORKER_DISK_LIMIT") {
				t.Errorf("WORKER_DISK_LIMIT=%s: %v, want an error naming it", tc.value, err)
			}
			continue
		}
		if err != nil || c.DiskLimit != tc.want {
			t.Errorf("WORKER_DISK_LIMIT=%s: %d %v, want %d", tc.value, c.DiskLimit, err, tc.want)
		}
	}
	s := newEnvOnlySpawner(t)
	s.cfg.DiskLimit = 10 << 30
	for _, tc := range []struct {
		disk string
		want int64
	}{{"", 10 << 30}, {"64m", 64 << 20}} {
		o := createOpts{}
		is := s.inst.instanceSpec("w1", "", protocol.WorkerSpec{AgentType: protocol.AgentClaude, Limits: protocol.Limits{Disk: tc.disk}}, "img", "redis://x", time.Now(), &o)
		if is.Limits.Disk != tc.want || !slices.Contains(is.Env, protocol.EnvDiskLimit+"="+strconv.FormatInt(tc.want, 10)) {
			t.Errorf("limits.disk %q: the instance's disk %d, env %v; want %d, told to the wrapper", tc.disk, is.Limits.Disk, is.Env, tc.want)
		}
	}
}

// WORKER_MEMORY_LIMIT's parser accepts what Docker's units.RAMInBytes,
// which it replaced, accepts, with the same number of bytes.
func TestConfigSizeAsDocker(t *testing.T) {
	for _, s := range []string{"512m", "512M", "6m", "1g", "1G", "2GiB", "2gib", "1.5g", "100000000", "7 m", "1mb", "1MB", "1mib", "3k", "1t", "1p", "10b", "10B",
		"x", "m", "-1m", "1mbb", "1 ", " 1m", "1.2.3m", "5x", "1e3", "1e3m", "0", ".5g", "1mi"} {
		want, werr := units.RAMInBytes(s)
		got, gerr := envconf.ParseSize(s)
		if (werr == nil) != (gerr == nil) || werr == nil && got != want {
			t.Errorf("%q: %d %v; Docker: %d %v", s, got, gerr, want, werr)
		}
	}
}

// A spec's git reaches the wrapper as WORKER_GIT, which it reads back
// the same; a spec without one sets none.
func TestSpecGitReachesTheWorker(t *testing.T) {
	s := newEnvOnlySpawner(t)
	g := &protocol.Git{Remote: "https://git.example.test/shop/api.git", Base: "main", Branch: "agentvisor/po"}
	var got string
	for _, kv := range s.inst.workerEnv("w1", protocol.WorkerSpec{AgentType: protocol.AgentClaude, Git: g}, "redis://x") {
		if v, ok := strings.CutPrefix(kv, protocol.EnvGitDefault+"="); ok {
			got = v
		}
	}
	back, err := protocol.DecodeGitDefault(got)
	if err != nil || back == nil || *back != *g {
		t.Fatalf("%s=%q: %+v %v", protocol.EnvGitDefault, got, back, err)
	}
	if slices.ContainsFunc(s.inst.workerEnv("w1", protocol.WorkerSpec{AgentType: protocol.AgentClaude}, "redis://x"),
		func(v string) bool { return strings.HasPrefix(v, protocol.EnvGitDefault+"=") }) {
		t.Error("a spec without git set WORKER_GIT")
	}
}

// A long-lived worker with a project_id is bound to it (its wrapper gets
// WORKER_PROJECT_ID); a developer worker with one is not, nor a worker
// without.
func TestWorkerEnvNamesTheBoundProject(t *testing.T) {
	s := newEnvOnlySpawner(t)
	tests := []struct {
		name string
		spec protocol.WorkerSpec
		want string
	}{
		{"long-lived with a project", protocol.WorkerSpec{AgentType: protocol.AgentClaude, ProjectID: "pa"}, "pa"},
		{"developer with a project", protocol.WorkerSpec{AgentType: protocol.AgentClaude, Kind: protocol.KindDeveloper, ProjectID: "pa"}, ""},
		{"no project", protocol.WorkerSpec{AgentType: protocol.AgentClaude}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ""
			for _, kv := range s.inst.workerEnv("w1", tt.spec, "redis://x") {
				if v, ok := strings.CutPrefix(kv, protocol.EnvWorkerProject+"="); ok {
					got = v
				}
			}
			if got != tt.want {
				t.Fatalf("%s=%q, want %q", protocol.EnvWorkerProject, got, tt.want)
			}
		})
	}
}

// newEnvOnlySpawner is a Spawner of the default configuration with
// nothing behind it, for what it computes from a spec alone.
func newEnvOnlySpawner(t *testing.T) *Spawner {
	t.Helper()
	c, err := ConfigFromEnv(func(k string) string {
		if k == "REDIS_URL" {
			return "redis://127.0.0.1:1/0"
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	return New(c, nil, nil, nil, nil)
}
