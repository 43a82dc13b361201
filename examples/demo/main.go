// Command demo runs the project's main job end to end and prints it as one
// timeline: a worker-manager, a Claude worker with the GIT capability that
// commits a file and reports progress through its shell tool, stops with
// its JSON output, is paused, is woken by a second task of the same project
// and resumes its session, has its egress refused off its allowlist,
// clones a private git host over HTTPS with a credential the gateway adds
// (the agent never holds it), and asks its task's owner before a command
// outside its ALLOWED_COMMANDS (an approval); a Droid worker, whose second
// task is cancelled while it runs; the usage per project; and a clean-up
// that leaves no container behind.
//
// Without ANTHROPIC_API_KEY the agents talk to the project's stub model
// server (started here, on loopback); with it, to the real API. `make demo`
// prepares everything and runs it:
//
//	demo -manager bin/worker-manager -redis "$REDIS_CONSUMER_URL" -manager-redis "$REDIS_MANAGER_URL"
//
// The demo's own client (commands, tasks, the timeline) connects with
// -redis, the consumer user of the project's Redis (scripts/redis.sh);
// the worker-manager with -manager-redis, the manager user, from which it
// makes each worker's own Redis user. -redis (or REDIS_URL) alone serves
// both; without either they come from REDIS_CONSUMER_URL and
// REDIS_MANAGER_URL, of the environment or of
// /var/lib/agentvisor/redis/credentials.env.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/client"
	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/redisconn"
	"github.com/agentvisor/agentvisor/stubmodel"
)

func main() {
	managerBin := flag.String("manager", "bin/worker-manager", "the worker-manager binary to run")
	gatewayBin := flag.String("gateway", "bin/worker-gateway", "the worker-gateway binary to run: the workers are sealed, and reach Redis and the model through it")
	redisURL := flag.String("redis", os.Getenv("REDIS_URL"), "the demo's own Redis URL, a consumer's (default: REDIS_URL, else REDIS_CONSUMER_URL of the environment or of the project's credentials file)")
	managerURL := flag.String("manager-redis", "", "the worker-manager's Redis URL, the same Redis as a user that may make users (default: -redis when given, else REDIS_MANAGER_URL likewise)")
	logDir := flag.String("logs", envOr("DEMO_LOGS", filepath.Join(os.TempDir(), "agentvisor-demo")), "where the manager's log goes")
	flag.Parse()
	// One URL given: a user that may do both (a Redis of one's own).
	if *managerURL == "" {
		*managerURL = *redisURL
	}
	for _, u := range []struct {
		url  *string
		name string
	}{{redisURL, redisconn.ConsumerURLName}, {managerURL, redisconn.ManagerURLName}} {
		if *u.url != "" {
			continue
		}
		var err error
		if *u.url, err = redisconn.DefaultURL(u.name); err != nil {
			fmt.Fprintf(os.Stderr, "demo: %v\n", err)
			os.Exit(2)
		}
	}
	d := &demo{managerBin: *managerBin, gatewayBin: *gatewayBin, redisURL: *redisURL, managerURL: *managerURL, logDir: *logDir,
		tl: newTimeline(os.Stdout, time.Now()), runID: strconv.FormatInt(time.Now().Unix()%1e6, 36)}
	// Ctrl-C stops the demo the same way as its end: the manager removes
	// every worker.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := d.run(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "\ndemo FAILED: %v\n", err)
		os.Exit(1)
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// demo is one run of the demo. run sets up (setup.go, processes.go), then
// runs the stages in order, each a file: claude.go (and the Claude
// worker's egress.go, clone.go, approval.go, hibernation.go), droid.go,
// codex.go, cancel.go, report.go; cleanup.go ends it. tasks.go is how
// every stage creates workers and gives them tasks; timeline.go prints.
type demo struct {
	managerBin, logDir string
	redisURL           string // the demo's own client (a consumer)
	managerURL         string // the worker-manager's (the same Redis)
	gatewayBin         string // the worker-gateway binary
	runID              string // makes this run's request ids unique

	tl    *timeline
	rdb   *redis.Client
	keys  protocol.Keys
	stub  *stubmodel.Server // nil with the real API
	cli   *client.Commands
	tasks *client.Tasks
	git   *gitServer // the private git host the Claude worker clones

	metricsAddr string // where the manager serves /metrics and the dashboard
	opsToken    string // the operator token they require
}

func (d *demo) run(ctx context.Context) error {
	err := d.connect(ctx)
	if err != nil {
		return err
	}
	defer d.rdb.Close()

	d.tl.section("set-up")
	if d.git, err = startGitServer(filepath.Join(d.logDir, "git")); err != nil {
		return err
	}
	defer func() { _ = d.git.close() }()
	d.tl.say("private git host https://%s/%s (git http-backend; a CA of its own, made now; Basic auth with a token only the gateway holds)", d.git.allow(), gitRepo)
	env, closeStub, err := d.managerEnv()
	if err != nil {
		return err
	}
	defer closeStub()
	earlier, err := d.forgetEarlierRuns(ctx)
	if err != nil {
		return err
	}
	defer d.tl.watch(ctx, d.rdb, d.keys)()

	gw, err := d.startGateway(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = gw.Process.Signal(syscall.SIGTERM); _ = gw.Wait() }()
	manager, err := d.startManager(env)
	if err != nil {
		return err
	}
	stopped := false
	defer func() {
		if !stopped {
			// A failed step: the manager still hibernates its workers, and
			// what they kept (project volumes) goes as on a clean end.
			_ = manager.Process.Signal(syscall.SIGTERM)
			_ = manager.Wait()
			_, _ = cleanUp(context.WithoutCancel(ctx), d.keys)
		}
	}()
	if err := d.deleteEarlierWorkers(ctx, earlier); err != nil {
		return err
	}
	for _, step := range []func(context.Context) error{d.dashboard, d.claudeWorker, d.droidWorker, d.codexWorker, d.usage, d.metrics} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	stopped = true
	return d.shutDown(ctx, manager)
}
