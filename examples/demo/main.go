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
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	dockerclient "github.com/docker/docker/client"
	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/client"
	"github.com/agentvisor/agentvisor/gateway"
	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/redisconn"
	"github.com/agentvisor/agentvisor/spawner"
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
	d := &demo{managerBin: *managerBin, gatewayBin: *gatewayBin, redisURL: *redisURL, managerURL: *managerURL, logDir: *logDir, out: os.Stdout, start: time.Now(),
		runID: strconv.FormatInt(time.Now().Unix()%1e6, 36)}
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

// The two projects of the demo: sessions and usage belong to a project.
const (
	projectShop  = "demo-shop"
	projectDocs  = "demo-docs"
	projectCodex = "demo-codex"
)

const instructions = `You are a worker of the agentvisor demo. Work in your current directory.
When a task asks you to report progress, run the command it gives in your shell.`

// Prompts that a real model can follow too (with ANTHROPIC_API_KEY).
const (
	promptCommit = `Create a git repository here, add a file hello.txt containing "hello from agentvisor", commit it, ` +
		`then report progress by running: worker-wrapper progress --step "Committed hello.txt" --pct 100 --output "<the commit's subject>". ` +
		`Run each command on its own: the worker allows git commands and the progress call, one simple command at a time. ` +
		`Finish with the JSON {"status": "complete", "result": {"file": "hello.txt"}}.`
	promptRecall = `Which file did you commit in the previous task? Finish with the JSON {"status": "complete", "result": {"file": "<its name>"}}.`
	promptEgress = `Run git ls-remote https://example.com/agentvisor.git on its own and tell me whether it answered. ` +
		`Finish with the JSON {"status": "complete", "result": {"reachable": <true or false>}}.`
	promptClone = `Clone ` + gitCloneURL + ` with git on its own, then run git -C shop log --oneline and tell me its commits. ` +
		`Finish with the JSON {"status": "complete", "result": {"cloned": "shop"}}.`
	promptApprove = `Run the shell command touch approved.txt on its own, then run git status --short. ` +
		`Finish with the JSON {"status": "complete", "result": {"file": "approved.txt"}}.`
	promptLong  = `Run the shell command sleep 30, then finish with the JSON {"status": "complete", "result": {}}.`
	promptCodex = `Create an empty file status.txt with touch, then report it by running: worker-wrapper progress --step "Created status.txt" --pct 100. ` +
		`Finish with the JSON {"status": "complete", "result": {"file": "status.txt"}}.`
	promptCodexRecall = `Which file did you create in the previous task? Finish with the JSON {"status": "complete", "result": {"file": "<its name>"}}.`
	promptDroid       = `Count the files in your current directory with ls -A, report it by running: worker-wrapper progress --step "Counted files" --pct 100 --output "<count> files". ` +
		`Finish with the JSON {"status": "complete", "result": {"files": <count>}}.`
)

// The workers' ALLOWED_COMMANDS: the agent CLIs refuse every other shell
// command, and a compound one (&&, ;, |, $(...)); the progress call is
// always allowed. The Claude worker asks its task's owner instead of
// refusing (AGENT_APPROVAL, workerEnv).
var (
	allowClaude = []string{"git.*"}
	allowDroid  = []string{"ls", "sleep"}
	allowCodex  = []string{"touch", "sleep"}
)

// workerEnv is the manager's WORKER_ENV: every worker keeps one agent
// process across its tasks (Claude's stream-json input, Droid's JSON-RPC
// mode), and a Claude worker asks its task's owner before a tool call
// ALLOWED_COMMANDS does not allow (Droid ignores AGENT_APPROVAL).
const workerEnv = `WORKER_ENV={"AGENT_PERSISTENT":"true","AGENT_APPROVAL":"true"}`

// stubPrices is the manager's MODEL_PRICES with the stub: Droid reports
// tokens, not dollars, and the wrapper prices what its proxy metered;
// the stub's Droid model (the wrapper's custom model, "agentvisor") gets
// Sonnet's price. Against the real API the defaults price
// claude-sonnet-4-5.
const stubPrices = `MODEL_PRICES={"agentvisor": {"input": 3, "output": 15, "cache_read": 0.3, "cache_write": 3.75}, ` +
	`"gpt-stub": {"input": 1.25, "output": 10, "cache_read": 0.125, "cache_write": 0}}`

// bash is a call of Claude's shell tool.
func bash(description, command string) *stubmodel.ToolUse {
	return &stubmodel.ToolUse{Name: "Bash", Input: map[string]any{"description": description, "command": command}}
}

// What the stub model answers to each task, in the agents' tool formats.
var (
	scriptEgress = stubmodel.Script{Steps: []stubmodel.Step{
		{ToolUse: bash("reach a host off the allowlist", "git ls-remote https://example.com/agentvisor.git")},
		{Text: "The host did not answer: the worker may not reach it.\n{\"status\": \"complete\", \"result\": {\"reachable\": false}}"},
	}}
	// The clone's last answer is held back a few seconds: the agent waits
	// for it, running, while the demo looks for the token in its container
	// (a worker is paused right after its output).
	scriptClone = stubmodel.Script{Steps: []stubmodel.Step{
		{ToolUse: bash("clone the shop's repository", "git clone -q "+gitCloneURL)},
		{ToolUse: bash("show its history", "git -C shop log --oneline")},
		{Text: "Cloned shop.git: one commit.\n{\"status\": \"complete\", \"result\": {\"cloned\": \"shop\"}}", DelayMS: 6000},
	}}
	scriptCommit = stubmodel.Script{Steps: []stubmodel.Step{
		{Text: "I will create the repository, commit the file and report progress.", ToolUse: bash("create the repository", "git init -q .")},
		{ToolUse: &stubmodel.ToolUse{Name: "Write", Input: map[string]any{"file_path": "hello.txt", "content": "hello from agentvisor\n"}}},
		{ToolUse: bash("stage hello.txt", "git add hello.txt")},
		{ToolUse: bash("commit hello.txt", `git -c user.name=demo -c user.email=demo@localhost commit -qm "Add hello.txt"`)},
		{ToolUse: bash("report progress", `worker-wrapper progress --step "Committed hello.txt" --pct 100 --output "Add hello.txt"`)},
		{Text: "hello.txt is committed.\n{\"status\": \"complete\", \"result\": {\"file\": \"hello.txt\"}}"},
	}}
	scriptCodex = stubmodel.Script{Steps: []stubmodel.Step{
		{ToolUse: bash("create status.txt", "touch status.txt")},
		{ToolUse: bash("report progress", `worker-wrapper progress --step "Created status.txt" --pct 100`)},
		{Text: "status.txt is there.\n{\"status\": \"complete\", \"result\": {\"file\": \"status.txt\"}}"},
	}}
	scriptCodexLong = stubmodel.Script{Steps: []stubmodel.Step{
		{ToolUse: bash("wait", "sleep 30")},
		{Text: "Slept.\n{\"status\": \"complete\", \"result\": {}}"},
	}}
	scriptCodexRecall = stubmodel.Script{Steps: []stubmodel.Step{
		{Text: "In the previous task I created status.txt.\n{\"status\": \"complete\", \"result\": {\"file\": \"status.txt\"}}"},
	}}
	scriptRecall = stubmodel.Script{Steps: []stubmodel.Step{
		{Text: "In the previous task I committed hello.txt.\n{\"status\": \"complete\", \"result\": {\"file\": \"hello.txt\"}}"},
	}}
	scriptApprove = stubmodel.Script{Steps: []stubmodel.Step{
		{ToolUse: bash("create approved.txt", "touch approved.txt")},
		{ToolUse: bash("show the new file", "git status --short")},
		{Text: "approved.txt is there.\n{\"status\": \"complete\", \"result\": {\"file\": \"approved.txt\"}}"},
	}}
	scriptLong = stubmodel.Script{Steps: []stubmodel.Step{
		{ToolUse: &stubmodel.ToolUse{Name: "Execute", Input: map[string]any{
			"command": "sleep 30", "riskLevel": "low", "riskLevelReason": "waits"}}},
		{Text: "Slept.\n{\"status\": \"complete\", \"result\": {}}"},
	}}
	scriptDroid = stubmodel.Script{Steps: []stubmodel.Step{
		{ToolUse: &stubmodel.ToolUse{Name: "Execute", Input: map[string]any{
			"command": "ls -A", "riskLevel": "low", "riskLevelReason": "reads the directory"}}},
		{ToolUse: &stubmodel.ToolUse{Name: "Execute", Input: map[string]any{
			"command":   `worker-wrapper progress --step "Counted files" --pct 100 --output "1 files"`,
			"riskLevel": "low", "riskLevelReason": "reports progress"}}},
		{Text: "Counted.\n{\"status\": \"complete\", \"result\": {\"files\": 1}}"},
	}}
)

type demo struct {
	managerBin, logDir string
	redisURL           string // the demo's own client (a consumer)
	managerURL         string // the worker-manager's (the same Redis)
	gatewayBin         string // the worker-gateway binary
	out                io.Writer
	start              time.Time
	runID              string // makes this run's request ids unique

	rdb   *redis.Client
	keys  protocol.Keys
	stub  *stubmodel.Server // nil with the real API
	cli   *client.Commands
	tasks *client.Tasks
	git   *gitServer // the private git host the Claude worker clones

	earlier []string // workers an earlier run left, deleted once the manager is up

	metricsAddr string // where the manager serves /metrics and the dashboard
	opsToken    string // the operator token they require

	mu     sync.Mutex
	names  map[string]string              // worker id → display name
	events map[string]chan protocol.Event // worker id → its lifecycle events
}

func (d *demo) say(format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(d.out, "%6.1fs  %s\n", time.Since(d.start).Seconds(), fmt.Sprintf(format, args...))
}

func (d *demo) section(title string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(d.out, "\n== %s\n", title)
}

func (d *demo) name(id string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if n, ok := d.names[id]; ok {
		return n
	}
	return short(id)
}

func (d *demo) run(ctx context.Context) error {
	d.names, d.events = map[string]string{}, map[string]chan protocol.Event{}
	err := d.connect(ctx)
	if err != nil {
		return err
	}
	defer d.rdb.Close()

	d.section("set-up")
	if d.git, err = startGitServer(filepath.Join(d.logDir, "git")); err != nil {
		return err
	}
	defer func() { _ = d.git.close() }()
	d.say("private git host https://%s/%s (git http-backend; a CA of its own, made now; Basic auth with a token only the gateway holds)", d.git.allow(), gitRepo)
	env, closeStub, err := d.managerEnv()
	if err != nil {
		return err
	}
	defer closeStub()
	if err := d.forgetEarlierRuns(ctx); err != nil {
		return err
	}
	defer d.watch(ctx)()

	gw, err := d.startGateway()
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
			_ = manager.Process.Signal(syscall.SIGTERM)
			_ = manager.Wait()
		}
	}()
	if err := d.deleteEarlierWorkers(ctx); err != nil {
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

// connect opens Redis and the clients over it.
func (d *demo) connect(ctx context.Context) error {
	var err error
	if d.rdb, err = redisconn.Open(d.redisURL); err != nil {
		return fmt.Errorf("redis url: %w", err)
	}
	wait, err := redisconn.Policy(d.redisURL)
	if err == nil {
		err = d.rdb.Ping(ctx).Err()
		if err != nil {
			err = fmt.Errorf("redis at %s does not answer: %w", protocol.RedactRedisURL(d.redisURL), err)
		}
	}
	if err == nil {
		d.keys, err = protocol.NewKeys(os.Getenv("WORKER_KEY_PREFIX"))
	}
	if err != nil {
		d.rdb.Close()
		return err
	}
	d.cli = &client.Commands{Redis: d.rdb, Keys: d.keys, Name: "demo", Timeout: 5 * time.Minute, Wait: wait}
	d.tasks = &client.Tasks{Redis: d.rdb, Keys: d.keys, Wait: wait}
	return nil
}

// managerEnv is the worker-manager's environment: the real Anthropic API
// when ANTHROPIC_API_KEY is set (and DEMO_STUB is not true), else the stub
// model, which the returned function stops.
func (d *demo) managerEnv() ([]string, func(), error) {
	d.opsToken = spawner.NewOpsToken()
	env := []string{"REDIS_URL=" + d.managerURL, "WORKER_KEY_PREFIX=" + d.keys.Prefix, "MANAGER_ID=demo", "HEARTBEAT_INTERVAL=2s", d.poolsEnv(), workerEnv,
		"WORKER_STOP_TIMEOUT=12s", "WORKER_NETWORK_MODE=sealed", "GATEWAY_DIR=" + d.gatewayDir(), "METRICS_ADDR=" + envOr("DEMO_METRICS_ADDR", "127.0.0.1:0"),
		"OPS_TOKEN=" + d.opsToken}
	if key := os.Getenv("ANTHROPIC_API_KEY"); key != "" && os.Getenv("DEMO_STUB") != "true" {
		d.say("ANTHROPIC_API_KEY is set: the agents use the real Anthropic API")
		return append(env, "DROID_BASE_URL=https://api.anthropic.com"), func() {}, nil
	}
	var err error
	if d.stub, err = stubmodel.Start(stubmodel.Script{}); err != nil {
		return nil, nil, err
	}
	d.say("stub model server (Anthropic Messages API stand-in) listening on %s", d.stub.URL)
	env = append(env, "ANTHROPIC_BASE_URL="+d.stub.URL, "DROID_BASE_URL="+d.stub.URL, "ANTHROPIC_API_KEY=sk-demo-stub-key",
		"OPENAI_BASE_URL="+d.stub.URL, "OPENAI_API_KEY=sk-demo-stub-key", stubPrices)
	return env, func() { _ = d.stub.Close() }, nil
}

// forgetEarlierRuns removes what an earlier run of the demo left in its
// projects: volumes, usage, sessions, stored context and session files,
// and the tasks still waiting on the inputs of its workers (a manager's
// stop hibernates long-lived workers, whose identity outlives it: the
// next task would wake one). Those workers are deleted once this run's
// manager is up (deleteEarlierWorkers).
func (d *demo) forgetEarlierRuns(ctx context.Context) error {
	if _, err := d.cleanUp(ctx); err != nil {
		return err
	}
	for _, p := range []string{projectShop, projectDocs, projectCodex} {
		for _, a := range []protocol.AgentType{protocol.AgentClaude, protocol.AgentDroid, protocol.AgentCodex} {
			d.rdb.Del(ctx, d.keys.Session(a, p), d.keys.SessionFiles(a, p))
		}
		d.rdb.Del(ctx, d.keys.UsageProject(p), d.keys.ProjectContext(p))
	}
	f := &client.Fleet{Redis: d.rdb, Keys: d.keys}
	ids, err := f.Workers(ctx)
	if err != nil {
		return err
	}
	sts, err := f.Statuses(ctx, ids)
	if err != nil {
		return err
	}
	d.earlier = nil
	for _, st := range sts {
		switch st.Hash[protocol.StatusFieldProjectID] {
		case projectShop, projectDocs, projectCodex:
			d.earlier = append(d.earlier, st.ID)
			kind := protocol.Kind(st.Hash[protocol.StatusFieldKind])
			d.rdb.Del(ctx, d.keys.InputsFor(kind, st.ID)...)
		}
	}
	return nil
}

// deleteEarlierWorkers deletes the workers an earlier run of the demo
// left (forgetEarlierRuns), through this run's manager.
func (d *demo) deleteEarlierWorkers(ctx context.Context) error {
	if len(d.earlier) == 0 {
		return nil
	}
	d.say("deleting %d workers an earlier run of the demo left (hibernated by its manager's stop, or lost with it)", len(d.earlier))
	for _, id := range d.earlier {
		if _, err := d.cli.Do(ctx, protocol.Command{Action: protocol.ActionDelete, WorkerID: id}); err != nil && !client.IsNotFound(err) {
			return fmt.Errorf("delete the earlier run's worker %s: %w", id, err)
		}
	}
	return nil
}

// watch prints the lifecycle and output streams as a timeline until the
// returned function is called.
func (d *demo) watch(ctx context.Context) (stop func()) {
	watchCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		w := &client.Watcher{Redis: d.rdb, Keys: d.keys, Rescan: 100 * time.Millisecond}
		done <- w.Run(watchCtx, d.print)
	}()
	return func() { cancel(); <-done }
}

// shutDown stops the worker-manager with SIGTERM and checks that it left
// no container behind.
func (d *demo) shutDown(ctx context.Context, manager *exec.Cmd) error {
	d.section("clean-up")
	d.say("worker-manager: SIGTERM (it hibernates its long-lived workers and removes the others: no container is left)")
	t0 := time.Now()
	_ = manager.Process.Signal(syscall.SIGTERM)
	if err := manager.Wait(); err != nil {
		return fmt.Errorf("the worker-manager did not shut down cleanly (%v); its log: %s", err, d.logPath())
	}
	time.Sleep(300 * time.Millisecond) // the last lifecycle events reach the timeline
	left, err := d.cleanUp(ctx)
	if err != nil {
		return err
	}
	d.say("worker-manager stopped in %.1fs; %d worker containers left, project volumes removed", time.Since(t0).Seconds(), left)
	if left != 0 {
		return fmt.Errorf("%d containers left behind", left)
	}
	fmt.Fprintf(d.out, "\ndemo complete in %.0fs. The manager's log: %s\n", time.Since(d.start).Seconds(), d.logPath())
	return nil
}

func (d *demo) logPath() string { return filepath.Join(d.logDir, "worker-manager.log") }

// gatewayDir is where the demo's gateway keeps its sockets (short: a unix
// socket's path has at most 107 bytes).
func (d *demo) gatewayDir() string { return filepath.Join(d.logDir, "gw") }

// startGateway starts the host's worker-gateway for the sealed workers:
// their Redis (this demo's) and their model API (the stub, or Anthropic's)
// through sockets, nothing else.
func (d *demo) startGateway() (*exec.Cmd, error) {
	u, err := protocol.ParseRedisURL(d.managerURL)
	if err != nil {
		return nil, err
	}
	model := "api.anthropic.com:443"
	if d.stub != nil {
		model = d.stub.URL // plain HTTP: a stub on this host
	}
	if err := os.MkdirAll(d.logDir, 0o755); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(d.logDir, "worker-gateway.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(d.gatewayBin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	creds := filepath.Join(d.logDir, "gateway-credentials.json")
	if err := d.git.writeCredentials(creds, projectShop); err != nil {
		return nil, err
	}
	cmd.Env = append(os.Environ(), "GATEWAY_DIR="+d.gatewayDir(), "GATEWAY_REDIS="+u.Addrs[0], "GATEWAY_MODEL="+model,
		"GATEWAY_CREDENTIALS_FILE="+creds, "GATEWAY_UPSTREAM_CA="+d.git.caFile)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", d.gatewayBin, err)
	}
	// The manager's first create asks it for sockets: wait for its control socket.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := gateway.NewClient(d.gatewayDir()).Workers(context.Background()); err == nil {
			break
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			return nil, fmt.Errorf("the worker-gateway did not answer within 10 s; its log: %s", logf.Name())
		}
	}
	d.say("worker-gateway started (pid %d): the workers are sealed, no network of their own; Redis (%s) and the model (%s) through its sockets in %s",
		cmd.Process.Pid, u.Addrs[0], model, d.gatewayDir())
	d.say("the gateway holds the git host's token (GATEWAY_CREDENTIALS_FILE, mode 0600, for project %s) and trusts its CA (GATEWAY_UPSTREAM_CA)", projectShop)
	return cmd, nil
}

func (d *demo) startManager(env []string) (*exec.Cmd, error) {
	if err := os.MkdirAll(d.logDir, 0o755); err != nil {
		return nil, err
	}
	logf, err := os.Create(d.logPath())
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(d.managerBin)
	// Should the demo die, the manager gets SIGTERM and removes the workers.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", d.managerBin, err)
	}
	d.say("worker-manager started (pid %d, log %s)", cmd.Process.Pid, d.logPath())
	return cmd, nil
}

// create asks the manager for a worker and registers its display name.
func (d *demo) create(ctx context.Context, name string, spec protocol.WorkerSpec) (string, error) {
	caps := make([]string, len(spec.Capabilities))
	for i, c := range spec.Capabilities {
		caps[i] = string(c)
	}
	d.say("command create: %s worker, project %s, capabilities [%s]", spec.AgentType, spec.ProjectID, strings.Join(caps, " "))
	t0 := time.Now()
	reply, err := d.cli.Do(ctx, protocol.Command{Action: protocol.ActionCreate, Spec: &spec})
	if err != nil {
		return "", fmt.Errorf("create %s: %w (manager log: %s)", name, err, d.logPath())
	}
	w := reply.Worker
	if w == nil {
		return "", fmt.Errorf("create %s: the reply names no worker", name)
	}
	d.mu.Lock()
	d.names[w.WorkerID] = name
	d.mu.Unlock()
	d.channels(w.WorkerID)
	if d.rdb.HGet(ctx, d.keys.Status(w.WorkerID), protocol.StatusFieldPoolState).Val() == protocol.PoolAllocated {
		took := time.Since(t0)
		// What the worker did in the pool (its paused event) is behind us:
		// the timeline of this worker starts at its allocation.
		if err := d.waitEvent(w.WorkerID, protocol.EventAllocated, 30*time.Second); err != nil {
			return "", err
		}
		d.say("reply: %s = worker %s from the warm pool (%.0f ms: an unpause, no container made); the pool makes another", name, w.WorkerID, float64(took.Microseconds())/1000)
		return w.WorkerID, nil
	}
	d.say("reply: %s = worker %s, image %s (%.1fs; a missing image is built first)", name, w.WorkerID, w.Image, time.Since(t0).Seconds())
	return w.WorkerID, nil
}

func (d *demo) channels(id string) chan protocol.Event {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.events[id]; !ok {
		d.events[id] = make(chan protocol.Event, 64)
	}
	return d.events[id]
}

// send puts a task on the worker's input stream and waits for its
// output, which must be complete.
func (d *demo) send(ctx context.Context, id, project, requestID, prompt string, script stubmodel.Script) (protocol.Output, error) {
	sent, err := d.put(ctx, id, project, requestID, prompt, script)
	if err != nil {
		return protocol.Output{}, err
	}
	return d.await(ctx, sent, protocol.StatusComplete, nil)
}

// put puts a task on the worker's input stream.
func (d *demo) put(ctx context.Context, id, project, requestID, prompt string, script stubmodel.Script) (client.Sent, error) {
	if d.stub != nil {
		d.stub.SetScript(script)
	}
	// Request ids are unique per request: a run's status outlives it.
	requestID += "-" + d.runID
	sent, err := d.tasks.Send(ctx, id, protocol.Task{RequestID: requestID, ProjectID: project, Prompt: prompt, TimeoutSeconds: 240})
	if err != nil {
		return sent, err
	}
	short := prompt
	if len(short) > 70 {
		short = short[:67] + "..."
	}
	d.say("task %s → %s: %q", requestID, sent.Input, short)
	return sent, nil
}

// await waits for the task's output, which must have status want; each
// permission request of the task goes to answer (nil: none expected).
// The timeline (print) shows the progress and the output as the watcher
// reads them.
func (d *demo) await(ctx context.Context, sent client.Sent, want protocol.OutputStatus, answer func(protocol.PermissionRequest) error) (protocol.Output, error) {
	wctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	var (
		o         protocol.Output
		answerErr error
	)
	err := d.tasks.Watch(wctx, sent, func(ev client.Event) {
		switch {
		case ev.Output != nil:
			o = *ev.Output
		case ev.Permission != nil && answer == nil:
			answerErr = fmt.Errorf("task %s asked for a permission nobody answers: %s", sent.RequestID, ev.Data)
		case ev.Permission != nil && answerErr == nil:
			answerErr = answer(*ev.Permission)
		}
	})
	switch {
	case errors.Is(err, client.ErrAwaitTimeout):
		return o, fmt.Errorf("no output for task %s within 4 min (manager log: %s)", sent.RequestID, d.logPath())
	case err != nil:
		return o, err
	case answerErr != nil:
		return o, answerErr
	case o.Status != want:
		return o, fmt.Errorf("task %s ended %s, not %s: %+v", sent.RequestID, o.Status, want, o.Error)
	}
	return o, nil
}

// checkToolResult makes sure, with the stub, that the agent's shell tool
// reached the wrapper's progress endpoint: the tool result the model got
// back says so.
func (d *demo) checkToolResult(requestID string) error {
	if d.stub == nil {
		return nil
	}
	reqs := d.stub.Requests()
	if len(reqs) == 0 {
		return fmt.Errorf("task %s: the stub model got no request", requestID)
	}
	if text := reqs[len(reqs)-1].Text(); !strings.Contains(text, "progress recorded") {
		return fmt.Errorf("task %s: the shell tool did not report progress; the model got back: ...%s", requestID, text[max(0, len(text)-600):])
	}
	return nil
}

// waitEvent waits for a lifecycle event of the worker.
func (d *demo) waitEvent(id string, want protocol.Event, timeout time.Duration) error {
	evs := d.channels(id)
	deadline := time.After(timeout)
	for {
		select {
		case e := <-evs:
			if e == want {
				return nil
			}
		case <-deadline:
			return fmt.Errorf("worker %s: no %s event within %v", d.name(id), want, timeout)
		}
	}
}

// claudeSpec is the Claude worker of the demo, and the template of its
// warm pool: a create of exactly this spec takes the warm worker. Its
// egress allowlist names the private git host alone.
func (d *demo) claudeSpec() protocol.WorkerSpec {
	return protocol.WorkerSpec{AgentType: protocol.AgentClaude, ProjectID: projectShop,
		Capabilities: []protocol.Capability{protocol.CapGit}, Instructions: instructions, AllowedCommands: allowClaude,
		Network: &protocol.Network{Allow: []string{d.git.allow()}}}
}

// poolsEnv is the manager's POOLS: one warm Claude worker of the demo's
// spec, made ahead with its Claude process up, then paused.
func (d *demo) poolsEnv() string {
	b, _ := json.Marshal([]map[string]any{{"name": "claude-shop", "spec": d.claudeSpec(), "min_warm": 1, "max_total": 2}})
	return "POOLS=" + string(b)
}

// awaitWarm waits until the warm pool holds its worker (the first run
// builds the image first).
func (d *demo) awaitWarm(ctx context.Context) error {
	t0 := time.Now()
	for time.Since(t0) < 5*time.Minute {
		ps, err := spawner.ListPools(ctx, d.rdb, d.keys)
		if err == nil && len(ps) == 1 && ps[0].Warm >= 1 {
			d.say("warm pool claude-shop: a worker of this spec was made ahead, its Claude process started, then paused (%.1fs)", time.Since(t0).Seconds())
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("the warm pool did not fill within 5 min (manager log: %s)", d.logPath())
}

func (d *demo) claudeWorker(ctx context.Context) error {
	d.section("a Claude worker with the GIT capability")
	if err := d.awaitWarm(ctx); err != nil {
		return err
	}
	id, err := d.create(ctx, "claude-1", d.claudeSpec())
	if err != nil {
		return err
	}
	o1, err := d.send(ctx, id, projectShop, "shop-1", promptCommit, scriptCommit)
	if err != nil {
		return err
	}
	if err := d.checkToolResult("shop-1"); err != nil {
		return err
	}
	if err := d.waitEvent(id, protocol.EventPaused, 30*time.Second); err != nil {
		return err
	}
	st, err := d.cli.Do(ctx, protocol.Command{Action: protocol.ActionStatus, WorkerID: id})
	if err != nil {
		return err
	}
	d.say("command status: %s is %s (a paused worker uses no CPU and keeps its session)", d.name(id), st.Worker.Status)

	d.section("a second task for the same project wakes the worker")
	o2, err := d.send(ctx, id, projectShop, "shop-2", promptRecall, scriptRecall)
	if err != nil {
		return err
	}
	if o2.SessionID != o1.SessionID || o2.Session == nil || o2.Session.Action != protocol.SessionResume {
		return fmt.Errorf("task shop-2 did not resume the session of shop-1 (%s): session %s %+v", o1.SessionID, o2.SessionID, o2.Session)
	}
	if d.stub != nil {
		reqs := d.stub.Requests()
		if !strings.Contains(reqs[len(reqs)-1].Text(), "add a file hello.txt") {
			return fmt.Errorf("task shop-2: the resumed session did not carry the first task's turns to the model")
		}
		d.say("session %s resumed: the model got the first task's turns with the second prompt", short(o2.SessionID))
	} else {
		d.say("session %s resumed", short(o2.SessionID))
	}
	if err := d.waitEvent(id, protocol.EventPaused, 30*time.Second); err != nil {
		return err
	}
	if err := d.egress(ctx, id); err != nil {
		return err
	}
	if err := d.gitClone(ctx, id); err != nil {
		return err
	}
	if err := d.approval(ctx, id); err != nil {
		return err
	}
	return d.hibernation(ctx, id, o1.SessionID)
}

// hibernation hibernates the idle Claude worker (its container goes, its
// slot and memory are given back; its id, streams and session stay) and
// wakes it with a task that continues the session.
func (d *demo) hibernation(ctx context.Context, id, session string) error {
	d.section("hibernation: the worker gives back its container, keeps its id and session")
	r, err := d.cli.Do(ctx, protocol.Command{Action: protocol.ActionHibernate, WorkerID: id})
	if err != nil {
		return err
	}
	n, err := d.containersOf(ctx, id)
	if err != nil {
		return err
	}
	if r.Worker == nil || r.Worker.Status != protocol.ContainerHibernated || n != 0 {
		return fmt.Errorf("hibernate %s: status %+v, %d containers left", d.name(id), r.Worker, n)
	}
	d.say("command hibernate: %s is %s (0 containers; its slot and memory are free)", d.name(id), r.Worker.Status)
	start := time.Now()
	o, err := d.send(ctx, id, projectShop, "shop-4", promptRecall, scriptRecall)
	if err != nil {
		return err
	}
	if o.SessionID != session || o.Session == nil || o.Session.Action != protocol.SessionResume {
		return fmt.Errorf("task shop-4 after the wake did not resume session %s: session %s %+v", session, o.SessionID, o.Session)
	}
	st, err := d.cli.Do(ctx, protocol.Command{Action: protocol.ActionStatus, WorkerID: id})
	if err != nil {
		return err
	}
	d.say("task shop-4 woke %s (incarnation %d, %s from the task to its answer) and resumed session %s", d.name(id), st.Worker.Incarnation,
		time.Since(start).Round(10*time.Millisecond), short(o.SessionID))
	if d.stub != nil {
		reqs := d.stub.Requests()
		if !strings.Contains(reqs[len(reqs)-1].Text(), "add a file hello.txt") {
			return fmt.Errorf("task shop-4: the woken worker's session did not carry the first task's turns to the model")
		}
		d.say("the model got the first task's turns: the session outlived the container")
	}
	return d.waitEvent(id, protocol.EventPaused, 30*time.Second)
}

// containersOf counts the containers of a worker on the engine, found by
// name: a container adopted from a warm pool keeps the label of the
// worker it was made for.
func (d *demo) containersOf(ctx context.Context, id string) (int, error) {
	dc, err := dockerclient.NewClientWithOpts(dockerclient.FromEnv, dockerclient.WithAPIVersionNegotiation())
	if err != nil {
		return 0, err
	}
	defer dc.Close()
	name := "^/" + regexp.QuoteMeta(spawner.ContainerName(id)) + "$"
	cs, err := dc.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("name", name))})
	return len(cs), err
}

// egress has the sealed Claude worker's agent reach a host its allowlist
// does not name (it names the private git host alone): the gateway refuses the connection before
// any name is resolved, and the task's consumer sees the refusal as a
// warning.
func (d *demo) egress(ctx context.Context, id string) error {
	d.section("a sealed worker's egress: a host off its allowlist is refused, the consumer is told")
	sent, err := d.put(ctx, id, projectShop, "shop-egress", promptEgress, scriptEgress)
	if err != nil {
		return err
	}
	if _, err := d.await(ctx, sent, protocol.StatusComplete, nil); err != nil {
		return err
	}
	msgs, err := d.rdb.XRange(ctx, d.keys.Output(id), "-", "+").Result()
	if err != nil {
		return err
	}
	for _, m := range msgs {
		data, _ := protocol.EntryData(m.Values)
		if p, err := protocol.DecodeProgress(data); err == nil && p.RequestID == sent.RequestID && p.Refused != nil && p.Refused.Tool == "network" {
			d.say("refused: %s:%d is not on %s's egress allowlist (a warning on its output; the gateway resolved nothing)", p.Refused.Host, p.Refused.Port, d.name(id))
			return d.waitEvent(id, protocol.EventPaused, 30*time.Second)
		}
	}
	if d.stub == nil {
		d.say("the model did not try the host: no refusal to show")
		return d.waitEvent(id, protocol.EventPaused, 30*time.Second)
	}
	return fmt.Errorf("task shop-egress: no refused-connection warning on %s's output", d.name(id))
}

// approval gives the Claude worker a task whose command ALLOWED_COMMANDS
// does not allow: the worker asks (a permission_request on its output),
// the demo allows it (a permission_reply on its input), the command runs.
func (d *demo) approval(ctx context.Context, id string) error {
	d.section("an approval: a command outside ALLOWED_COMMANDS is asked of the task's owner")
	sent, err := d.put(ctx, id, projectShop, "shop-3", promptApprove, scriptApprove)
	if err != nil {
		return err
	}
	asked := 0
	_, err = d.await(ctx, sent, protocol.StatusComplete, func(p protocol.PermissionRequest) error {
		asked++
		d.say("%-8s permission_request %s: may the agent run %s %s? (denied after %v without an answer)", d.name(id), p.PermissionID, p.Tool, compact(p.Input),
			time.Duration(p.TimeoutMS)*time.Millisecond)
		d.say("permission_reply → %s: allow %s", sent.Input, p.PermissionID)
		return d.tasks.Answer(ctx, sent, p.PermissionID, true, "")
	})
	if err != nil {
		return err
	}
	if asked == 0 {
		return fmt.Errorf("task %s: the worker asked no permission for a command outside its ALLOWED_COMMANDS", sent.RequestID)
	}
	if d.stub != nil {
		reqs := d.stub.Requests()
		if !strings.Contains(reqs[len(reqs)-1].Text(), "?? approved.txt") {
			return fmt.Errorf("task %s: the allowed command did not run (git status does not show approved.txt)", sent.RequestID)
		}
		d.say("the allowed touch ran: git status shows approved.txt")
	}
	return d.waitEvent(id, protocol.EventPaused, 30*time.Second)
}

// codexWorker runs OpenAI's Codex as a third agent (its persistent
// `codex app-server`, the Responses API through the same sealed gateway
// and the wrapper's proxy): a task with a progress call, then a second
// one that continues its thread. With the real Anthropic API it is left
// out: it needs OpenAI's.
func (d *demo) codexWorker(ctx context.Context) error {
	if d.stub == nil {
		d.say("the Codex worker is left out: it needs the OpenAI API (the stub stands in for both)")
		return nil
	}
	d.section("a third agent: a Codex worker (OpenAI's Responses API, through the same sealed gateway)")
	id, err := d.create(ctx, "codex-1", protocol.WorkerSpec{AgentType: protocol.AgentCodex, ProjectID: projectCodex, Instructions: instructions,
		AllowedCommands: allowCodex, Model: "gpt-stub"})
	if err != nil {
		return err
	}
	o1, err := d.send(ctx, id, projectCodex, "codex-1", promptCodex, scriptCodex)
	if err != nil {
		return err
	}
	o2, err := d.send(ctx, id, projectCodex, "codex-2", promptCodexRecall, scriptCodexRecall)
	if err != nil {
		return err
	}
	if o2.SessionID != o1.SessionID {
		return fmt.Errorf("task codex-2 did not continue codex-1's thread %s: %s", o1.SessionID, o2.SessionID)
	}
	reqs := d.stub.Requests()
	if !strings.Contains(reqs[len(reqs)-1].Text(), "status.txt with touch") {
		return fmt.Errorf("task codex-2: the model did not get codex-1's turns")
	}
	d.say("thread %s continued: the model got the first task's turns (one codex app-server process served both)", short(o2.SessionID))
	if err := d.waitEvent(id, protocol.EventPaused, 30*time.Second); err != nil {
		return err
	}
	return d.cancel(ctx, id, projectCodex, "codex-3", "codex app-server", scriptCodexLong)
}

func (d *demo) droidWorker(ctx context.Context) error {
	d.section("a Droid worker")
	spec := protocol.WorkerSpec{AgentType: protocol.AgentDroid, ProjectID: projectDocs, Instructions: instructions,
		AllowedCommands: allowDroid}
	if d.stub == nil {
		// Droid reaches the real API through a custom model: name one the
		// API serves.
		spec.Model = envOr("DEMO_DROID_MODEL", "claude-sonnet-4-5")
	}
	id, err := d.create(ctx, "droid-1", spec)
	if err != nil {
		return err
	}
	if _, err := d.send(ctx, id, projectDocs, "docs-1", promptDroid, scriptDroid); err != nil {
		return err
	}
	if err := d.checkToolResult("docs-1"); err != nil {
		return err
	}
	if err := d.waitEvent(id, protocol.EventPaused, 30*time.Second); err != nil {
		return err
	}
	return d.cancel(ctx, id, projectDocs, "docs-2", "Droid", scriptLong)
}

// cancel gives the Droid worker a long task and cancels it while it runs:
// the persistent Droid gets an interrupt (its command is killed, the
// process serves on) and the task's one output is cancelled.
// cancel gives a worker a task that runs a 30 s sleep and cancels it
// once the agent runs it; the worker's agent process serves on.
func (d *demo) cancel(ctx context.Context, id, project, requestID, agentName string, script stubmodel.Script) error {
	d.section("a cancel: a running " + agentName + " task is ended on request")
	sent, err := d.put(ctx, id, project, requestID, promptLong, script)
	if err != nil {
		return err
	}
	if err := d.waitEvent(id, protocol.EventTaskStarted, time.Minute); err != nil {
		return err
	}
	if d.stub != nil {
		// The model asked for the sleep: the agent runs it.
		for t0 := time.Now(); len(d.stub.Requests()) == 0 || !strings.Contains(d.stub.Requests()[len(d.stub.Requests())-1].Text(), "sleep 30"); {
			if time.Since(t0) > time.Minute {
				return fmt.Errorf("task %s: the agent did not start (no model request)", sent.RequestID)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	time.Sleep(time.Second)
	d.say("cancel → %s: %s (\"not needed after all\")", sent.Input, sent.RequestID)
	t0 := time.Now()
	if err := d.tasks.Cancel(ctx, sent, "not needed after all"); err != nil {
		return err
	}
	if _, err := d.await(ctx, sent, protocol.StatusCancelled, nil); err != nil {
		return err
	}
	d.say("task %s cancelled %.0f ms after the cancel was sent; the %s process serves on", sent.RequestID, float64(time.Since(t0).Microseconds())/1000, agentName)
	return d.waitEvent(id, protocol.EventPaused, 30*time.Second)
}

// usage prints the cumulative usage per project, as the wrappers count it.
func (d *demo) usage(ctx context.Context) error {
	d.section("usage per project (worker:usage:project:<id>; Droid's and Codex's cost is the wrapper's estimate from their usage)")
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(d.out, "  %-10s %5s %8s %8s %10s %10s %9s\n", "PROJECT", "TASKS", "INPUT", "OUTPUT", "CACHE_RD", "CACHE_WR", "COST_USD")
	for _, p := range []string{projectShop, projectDocs, projectCodex} {
		h, err := d.rdb.HGetAll(ctx, d.keys.UsageProject(p)).Result()
		if err != nil {
			return err
		}
		if h[protocol.UsageFieldTasks] == "" {
			return fmt.Errorf("no usage recorded for project %s", p)
		}
		cost, _ := strconv.ParseFloat(h[protocol.UsageFieldCostUSD], 64)
		fmt.Fprintf(d.out, "  %-10s %5s %8s %8s %10s %10s %9.4f\n", p, h[protocol.UsageFieldTasks], h[protocol.UsageFieldInput],
			h[protocol.UsageFieldOutput], h[protocol.UsageFieldCacheRead], h[protocol.UsageFieldCacheCreation], cost)
	}
	return nil
}

// cleanUp counts the demo's worker containers left and removes the
// project volumes the workers kept their sessions in.
func (d *demo) cleanUp(ctx context.Context) (int, error) {
	dc, err := dockerclient.NewClientWithOpts(dockerclient.FromEnv, dockerclient.WithAPIVersionNegotiation())
	if err != nil {
		return 0, err
	}
	defer dc.Close()
	f := filters.NewArgs(filters.Arg("label", protocol.LabelManaged+"=true"), filters.Arg("label", protocol.LabelKeyPrefix+"="+d.keys.Prefix))
	cs, err := dc.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return 0, err
	}
	for _, p := range []struct {
		a protocol.AgentType
		p string
	}{{protocol.AgentClaude, projectShop}, {protocol.AgentDroid, projectDocs}, {protocol.AgentCodex, projectCodex}} {
		if err := dc.VolumeRemove(ctx, spawner.ProjectVolume(d.keys.Prefix, p.a, p.p), true); err != nil && !dockerclient.IsErrNotFound(err) {
			return len(cs), err
		}
	}
	return len(cs), nil
}

func short(s string) string { return s[:min(8, len(s))] }

// print is the timeline: every lifecycle, progress and output entry.
func (d *demo) print(ev client.Event) {
	if ev.Err != nil {
		d.say("stream %s: entry %s refused: %v", ev.Stream, ev.ID, ev.Err)
		return
	}
	id := ev.WorkerID()
	evs := d.channels(id)
	n := d.name(id)
	switch {
	case ev.Lifecycle != nil:
		l := ev.Lifecycle
		detail := ""
		switch l.Event {
		case protocol.EventCreated:
			detail = fmt.Sprintf(" (container %s)", short(fmt.Sprint(l.Detail["container_id"])))
		case protocol.EventStarted:
			detail = " (the wrapper reads its input stream)"
		case protocol.EventTaskStarted:
			detail = " " + l.RequestID
		case protocol.EventPauseRequested:
			detail = " (the wrapper asks the manager on worker:control)"
		case protocol.EventUnpaused:
			detail = " (input arrived)"
		case protocol.EventDied, protocol.EventStopped:
			if c, ok := l.Detail["exit_code"]; ok {
				detail = fmt.Sprintf(" (exit %v)", c)
			}
		}
		d.say("%-8s lifecycle %-15s from %s%s", n, l.Event, l.Source, detail)
		select {
		case evs <- l.Event:
		default:
		}
	case ev.Progress != nil:
		p := ev.Progress
		pct := ""
		if p.ProgressPct != nil {
			pct = fmt.Sprintf(" %d%%", *p.ProgressPct)
		}
		d.say("%-8s progress  %q%s %s", n, p.Step, pct, p.Output)
	case ev.Output != nil:
		o := ev.Output
		sess := ""
		if o.Session != nil {
			sess = fmt.Sprintf(", %s session (%s)", o.Session.Action, o.Session.Reason)
		}
		what := "result " + compact(o.Result)
		if o.Error != nil {
			what = string(o.Error.Code) + " (" + o.Error.Message + ")"
		}
		d.say("%-8s output    %s %s %s, session %s%s", n, o.RequestID, o.Status, what, short(o.SessionID), sess)
		d.say("%-8s           tokens in %d out %d cache %d/%d, context %d, $%.4f, %d ms", n, o.Usage.Input, o.Usage.Output,
			o.Usage.CacheRead, o.Usage.CacheCreation, o.ContextTokens, o.CostUSD, o.DurationMS)
	}
}

func compact(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "{}"
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// dashboard prints where the manager's dashboard and metrics are, as its
// state in Redis says.
func (d *demo) dashboard(ctx context.Context) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		ms, err := spawner.ListManagers(ctx, d.rdb, d.keys)
		if err != nil {
			return err
		}
		for _, m := range ms {
			if m.ID == "demo" && m.MetricsAddr != "" {
				d.metricsAddr = m.MetricsAddr
				d.say("dashboard: http://%s/login?token=%s (live while the demo runs; /metrics with Authorization: Bearer and the same token)", m.MetricsAddr, d.opsToken)
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the manager wrote no state with its metrics address (manager log: %s)", d.logPath())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// metrics prints what the manager's /metrics says about this run.
func (d *demo) metrics(ctx context.Context) error {
	d.section("metrics the manager saw (" + d.metricsAddr + "/metrics, agentvisor_*)")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.metricsAddr+"/metrics", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+d.opsToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	shown := 0
	for _, line := range strings.Split(string(body), "\n") {
		for _, name := range []string{"agentvisor_workers{", "agentvisor_tasks_total", "agentvisor_creates_total", "agentvisor_tokens_total",
			"agentvisor_cost_usd_total", "agentvisor_wake_duration_seconds_count", "agentvisor_lifecycle_events_total{event=\"paused\"}"} {
			if strings.HasPrefix(line, name) {
				fmt.Fprintf(d.out, "  %s\n", line)
				shown++
			}
		}
	}
	if shown == 0 {
		return fmt.Errorf("metrics: no agentvisor_ series in %d bytes", len(body))
	}
	return nil
}
