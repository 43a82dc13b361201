// Command quickstart is the smallest program that uses the runtime as a
// library: it creates a worker with the spawner, sends it a task on its
// input stream, waits for the task's output on its output stream, and
// removes the worker.
//
//	REDIS_URL=redis://manager:<password>@127.0.0.1:6379/0 go run ./quickstart "Say hello."
//
// Without REDIS_URL it uses the project's Redis (scripts/redis.sh) as its
// manager user, as the worker-manager would (the spawner makes each
// worker's Redis user): REDIS_MANAGER_URL of the environment or of
// /var/lib/agentvisor/redis/credentials.env.
//
// The worker reaches its model through what the spawner passes from this
// process's environment (ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL, ...).
// WORKER_KEY_PREFIX and the other spawner settings are read as the
// worker-manager reads them (spawner/README.md).
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/agentvisor/agentvisor/spawner/images"

	dockerclient "github.com/docker/docker/client"

	"github.com/agentvisor/agentvisor/client"
	"github.com/agentvisor/agentvisor/gateway"
	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/redisconn"
	"github.com/agentvisor/agentvisor/spawner"
)

func main() {
	prompt := `Report progress by running: worker-wrapper progress --step "Greeting" --pct 100, ` +
		`then finish with {"status": "complete", "result": {"greeting": "hello"}}.`
	if len(os.Args) > 1 {
		prompt = strings.Join(os.Args[1:], " ")
	}
	// Ctrl-C ends the wait for the output; the worker is still removed.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, prompt)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, prompt string) error {
	// 1. A spawner: configuration from the environment, a Redis client and
	// a Docker client.
	if os.Getenv("REDIS_URL") == "" {
		url, err := redisconn.DefaultURL(redisconn.ManagerURLName)
		if err != nil {
			return err
		}
		os.Setenv("REDIS_URL", url)
	}
	cfg, err := spawner.ConfigFromEnv(os.Getenv)
	if err != nil {
		return err
	}
	rdb, err := redisconn.Open(cfg.RedisURL) // redis://, rediss:// or a sentinel URL
	if err != nil {
		return err
	}
	defer rdb.Close()
	wait, err := redisconn.Policy(cfg.RedisURL) // WAIT for a replica on the task sent (a sentinel URL)
	if err != nil {
		return err
	}
	dc, err := dockerclient.NewClientWithOpts(dockerclient.FromEnv, dockerclient.WithAPIVersionNegotiation())
	if err != nil {
		return err
	}
	defer dc.Close()
	dc.NegotiateAPIVersion(ctx)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if cfg.NetworkMode == spawner.NetworkSealed {
		// Workers are sealed (the default): their Redis and model API
		// come through this host's gateway. A deployment runs
		// worker-gateway beside the engine; without one, this program
		// serves its worker's sockets itself.
		stop, err := ensureGateway(ctx, &cfg, log)
		if err != nil {
			return err
		}
		defer stop()
	}
	s := spawner.NewDocker(cfg, dc, rdb, &images.Builder{Docker: dc, Redis: rdb, Keys: cfg.Keys}, log)

	// 2. A worker: Claude Code in its own container (the image is built on
	// first use).
	// It may report progress (the worker.progress command).
	w, err := s.Create(ctx, protocol.WorkerSpec{AgentType: protocol.AgentClaude, ProjectID: "quickstart",
		AllowedCommands: []string{protocol.ProgressCommand}})
	if err != nil {
		return err
	}
	defer s.Delete(context.WithoutCancel(ctx), w.WorkerID)
	fmt.Printf("worker %s created (image %s)\n", w.WorkerID, w.Image)

	// 3. A task on the worker's input stream, and 4. its output from the
	// worker's output stream (progress events arrive there first).
	tasks := &client.Tasks{Redis: rdb, Keys: cfg.Keys, Wait: wait}
	task := protocol.Task{RequestID: fmt.Sprintf("quickstart-%d", time.Now().UnixNano()), ProjectID: "quickstart", Prompt: prompt}
	sent, err := tasks.Send(ctx, w.WorkerID, task)
	if err != nil {
		return err
	}
	fmt.Printf("task %s sent\n", sent.RequestID)
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	o, err := tasks.Await(wctx, sent, func(p protocol.Progress) { fmt.Printf("progress: %s\n", p.Step) })
	if err != nil {
		return err
	}
	fmt.Printf("output: %s, result %s, %d input and %d output tokens, $%.4f\n", o.Status, o.Result, o.Usage.Input, o.Usage.Output, o.CostUSD)
	if o.Status != protocol.StatusComplete {
		return fmt.Errorf("the task ended %s: %+v", o.Status, o.Error)
	}
	return nil
}

// ensureGateway uses the host's gateway when one answers at GATEWAY_DIR,
// else starts one in this process, in a directory of its own, relayed to
// the workers' Redis and to the model API (ANTHROPIC_BASE_URL), and points
// cfg at it. stop ends it.
func ensureGateway(ctx context.Context, cfg *spawner.Config, log *slog.Logger) (stop func(), err error) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := gateway.NewClient(cfg.GatewayDir).Workers(cctx); err == nil {
		return func() {}, nil
	}
	u, err := protocol.ParseRedisURL(cfg.RedisURLForWorkers)
	if err != nil {
		return nil, err
	}
	model := os.Getenv("ANTHROPIC_BASE_URL") // the gateway takes the URL's scheme and host
	if model == "" {
		model = "https://api.anthropic.com"
	}
	dir, err := os.MkdirTemp("", "gw") // short: a unix socket path is at most 107 bytes
	if err != nil {
		return nil, err
	}
	g, err := gateway.New(gateway.Config{Dir: dir, Redis: u.Addrs[0], Model: model, Log: log})
	if err == nil {
		err = g.Start()
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start a gateway for the sealed worker: %w", err)
	}
	cfg.GatewayDir = dir
	return func() { _ = g.Stop(context.Background()); os.RemoveAll(dir) }, nil
}
