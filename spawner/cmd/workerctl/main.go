// Command workerctl shows and drives agentvisor workers from a shell:
//
//	workerctl list                         every worker, with status and health
//	workerctl status WORKER                one worker, with its heartbeat
//	workerctl events [-f] [-worker W]      lifecycle, progress and output events
//	workerctl spawn -agent claude ...      ask a worker-manager for a worker
//	workerctl send WORKER PROMPT [-wait]   put a task on a worker's input
//	workerctl pause|resume|kill WORKER     through a worker-manager
//	workerctl usage [-project P]           tokens and cost per project
//
// Tables are for people; -json prints JSON for scripts (one document, or
// one line per event). WORKER may be a unique prefix of a worker id.
// list, status, events, send and usage read Redis directly and work with no
// manager running; spawn, pause, resume and kill are commands a
// worker-manager executes.
//
// Exit codes: 0 done; 1 failed (an error reply, Redis unreachable); 2 bad
// usage; 3 no such worker; 4 the task ended blocked; 5 the task ended
// failed; 6 timed out waiting.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner"
)

// Exit codes.
const (
	exitOK       = 0
	exitFailed   = 1
	exitUsage    = 2
	exitNotFound = 3
	exitBlocked  = 4
	exitTaskFail = 5
	exitTimeout  = 6
)

// exitError carries the exit code an error ends workerctl with.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }

func fail(code int, format string, args ...any) error {
	return &exitError{code, fmt.Errorf(format, args...)}
}

const usageText = `usage: workerctl [-redis URL] [-prefix P] [-json] COMMAND [ARGS]

commands:
  list                              every worker, with status and health
  status WORKER                     one worker, with its heartbeat
  events [-f [-all]] [-worker W]    lifecycle, progress and output events; -f follows
                                    new ones (-all: what the streams hold first)
  spawn -agent claude|droid [-kind long_lived|developer] [-project P]
        [-cap GIT]... [-allow CMD]... [-instructions TEXT|@FILE]
        [-memory 512m] [-cpus 0.5] [-env K=V]...
  send WORKER PROMPT [-project P] [-id REQUEST_ID] [-new-session] [-wait] [-timeout 10m]
  pause WORKER | resume WORKER | kill WORKER
  usage [-project P]...             tokens and cost per project
  volumes [-rm NAME]                project volumes of this prefix (needs the Docker engine); -rm removes an unused one

WORKER is a worker id or a unique prefix of one. REDIS_URL (default
redis://127.0.0.1:6379/0) and WORKER_KEY_PREFIX (default worker) set the
defaults of -redis and -prefix.

exit codes: 0 done, 1 failed, 2 bad usage, 3 no such worker,
4 task blocked, 5 task failed, 6 timed out
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

type ctl struct {
	rdb  *redis.Client
	keys protocol.Keys
	json bool
	out  io.Writer
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("workerctl", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	redisURL := fs.String("redis", envOr("REDIS_URL", "redis://127.0.0.1:6379/0"), "")
	prefix := fs.String("prefix", os.Getenv("WORKER_KEY_PREFIX"), "")
	asJSON := fs.Bool("json", false, "")
	if err := fs.Parse(args); err != nil || fs.NArg() == 0 {
		if err != nil && !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, "workerctl:", err)
		}
		fmt.Fprint(stderr, usageText)
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	keys, err := protocol.NewKeys(*prefix)
	if err != nil {
		fmt.Fprintln(stderr, "workerctl: -prefix:", err)
		return exitUsage
	}
	opt, err := redis.ParseURL(*redisURL)
	if err != nil {
		fmt.Fprintln(stderr, "workerctl: -redis: not a valid redis:// or rediss:// URL:", spawner.RedactURL(*redisURL))
		return exitUsage
	}
	c := &ctl{rdb: redis.NewClient(opt), keys: keys, json: *asJSON, out: stdout}
	defer c.rdb.Close()
	cmd, rest := fs.Arg(0), fs.Args()[1:]
	handlers := map[string]func(context.Context, []string) error{
		"list": c.list, "status": c.status, "events": c.events, "spawn": c.spawn, "send": c.send,
		"pause": c.action(protocol.ActionPause), "resume": c.action(protocol.ActionUnpause),
		"kill": c.action(protocol.ActionDelete), "usage": c.usage, "volumes": c.volumes,
	}
	h, ok := handlers[cmd]
	if !ok {
		fmt.Fprintf(stderr, "workerctl: unknown command %q\n%s", cmd, usageText)
		return exitUsage
	}
	err = h(ctx, rest)
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(stderr, "workerctl:", err)
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	var se *spawner.Error
	if errors.As(err, &se) && se.Code == protocol.CodeNotFound {
		return exitNotFound
	}
	return exitFailed
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// parse parses flags that may come before, between or after the
// positional arguments, and checks their count.
func parse(fs *flag.FlagSet, args []string, positional int) ([]string, error) {
	fs.SetOutput(io.Discard)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, fail(exitUsage, "%s: %v", fs.Name(), err)
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	if len(pos) != positional {
		return nil, fail(exitUsage, "%s: want %d argument(s), got %d (see workerctl -h)", fs.Name(), positional, len(pos))
	}
	return pos, nil
}

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func (c *ctl) printJSON(v any) error {
	enc := json.NewEncoder(c.out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// resolve turns a worker id or unique prefix into the worker id.
func (c *ctl) resolve(ctx context.Context, arg string) (string, error) {
	ids, err := c.rdb.SMembers(ctx, c.keys.Workers()).Result()
	if err != nil {
		return "", fmt.Errorf("redis: %w", err)
	}
	var found []string
	for _, id := range ids {
		if id == arg {
			return id, nil
		}
		if strings.HasPrefix(id, arg) {
			found = append(found, id)
		}
	}
	switch len(found) {
	case 0:
		return "", fail(exitNotFound, "no worker %q", arg)
	case 1:
		return found[0], nil
	}
	return "", fail(exitUsage, "%q names %d workers; give more of the id", arg, len(found))
}

// workerRow is a worker as list and status show it.
type workerRow struct {
	protocol.WorkerInfo
	CreatedAt time.Time           `json:"created_at,omitzero"`
	Heartbeat *protocol.Heartbeat `json:"heartbeat,omitempty"`
}

func (c *ctl) read(ctx context.Context, id string) (workerRow, error) {
	h, err := c.rdb.HGetAll(ctx, c.keys.Status(id)).Result()
	if err != nil {
		return workerRow{}, fmt.Errorf("redis: %w", err)
	}
	if len(h) == 0 {
		return workerRow{}, fail(exitNotFound, "no worker %q", id)
	}
	row := workerRow{WorkerInfo: spawner.InfoFromHash(id, h)}
	row.CreatedAt, _ = protocol.ParseTime(h[protocol.StatusFieldCreatedAt])
	if doc, err := c.rdb.Get(ctx, c.keys.Heartbeat(id)).Bytes(); err == nil {
		if hb, err := protocol.DecodeHeartbeat(doc); err == nil {
			row.Heartbeat = &hb
		}
	}
	return row, nil
}

func (c *ctl) list(ctx context.Context, args []string) error {
	if _, err := parse(flag.NewFlagSet("list", flag.ContinueOnError), args, 0); err != nil {
		return err
	}
	ids, err := c.rdb.SMembers(ctx, c.keys.Workers()).Result()
	if err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	rows := make([]workerRow, 0, len(ids))
	for _, id := range ids {
		row, err := c.read(ctx, id)
		if err != nil {
			var ee *exitError
			if errors.As(err, &ee) && ee.code == exitNotFound {
				continue // removed meanwhile
			}
			return err
		}
		rows = append(rows, row)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].CreatedAt.Before(rows[j].CreatedAt) })
	if c.json {
		return c.printJSON(rows)
	}
	tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKER\tAGENT\tKIND\tSTATUS\tSTATE\tHEALTH\tPROJECT\tTASK\tAGE\tHEARTBEAT")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", shortID(r.WorkerID), r.AgentType, r.Kind,
			r.Status, dash(string(r.State)), dash(string(r.Health)), dash(r.ProjectID), dash(r.RequestID), age(r.CreatedAt), heartbeatAge(r.Heartbeat))
	}
	return tw.Flush()
}

// shortID is how tables show a worker id: enough to tell workers apart,
// and a prefix every command accepts.
func shortID(id string) string { return id[:min(8, len(id))] }

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func age(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return time.Since(t).Round(time.Second).String()
}

func heartbeatAge(hb *protocol.Heartbeat) string {
	if hb == nil {
		return "-"
	}
	return age(hb.Timestamp) + " ago"
}

func (c *ctl) status(ctx context.Context, args []string) error {
	pos, err := parse(flag.NewFlagSet("status", flag.ContinueOnError), args, 1)
	if err != nil {
		return err
	}
	id, err := c.resolve(ctx, pos[0])
	if err != nil {
		return err
	}
	r, err := c.read(ctx, id)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(r)
	}
	tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	line := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, dash(v)) }
	line("worker", r.WorkerID)
	line("agent", string(r.AgentType))
	line("kind", string(r.Kind))
	line("status", string(r.Status))
	line("state", string(r.State))
	line("health", string(r.Health))
	line("project", r.ProjectID)
	line("image", r.Image)
	line("container", r.ContainerID)
	line("task", r.RequestID)
	line("created", age(r.CreatedAt)+" ago")
	if r.ExitCode != nil {
		line("exit code", strconv.Itoa(*r.ExitCode))
	}
	line("error", r.Error)
	if hb := r.Heartbeat; hb != nil {
		line("heartbeat", fmt.Sprintf("%s ago: %s, RSS %.1f MB, CPU %.2f%%, %d tasks done", age(hb.Timestamp), hb.Status,
			float64(hb.RSSBytes)/1e6, hb.CPUPercent, hb.TasksCompleted))
	} else {
		line("heartbeat", "none (paused, stopped, or not started)")
	}
	return tw.Flush()
}

func (c *ctl) events(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("events", flag.ContinueOnError)
	follow := fs.Bool("f", false, "")
	worker := fs.String("worker", "", "")
	fromStart := fs.Bool("all", false, "")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	w := &spawner.Watcher{Redis: c.rdb, Keys: c.keys, FromStart: *fromStart}
	if *worker != "" {
		id, err := c.resolve(ctx, *worker)
		if err != nil {
			return err
		}
		w.Workers = []string{id}
	}
	if !*follow {
		// What the streams hold now, in time order.
		var evs []spawner.Event
		for _, st := range c.streams(ctx, w.Workers) {
			msgs, err := c.rdb.XRange(ctx, st, "-", "+").Result()
			if err != nil {
				return fmt.Errorf("redis: %w", err)
			}
			for _, m := range msgs {
				ev := spawner.DecodeEvent(st, m)
				if len(w.Workers) == 0 || ev.Err != nil || ev.WorkerID() == w.Workers[0] {
					evs = append(evs, ev)
				}
			}
		}
		sort.SliceStable(evs, func(i, j int) bool { return idBefore(evs[i].ID, evs[j].ID) })
		for _, ev := range evs {
			c.printEvent(ev)
		}
		return nil
	}
	return w.Run(ctx, c.printEvent)
}

// idBefore orders stream entry ids (ms-seq) of different streams by time.
func idBefore(a, b string) bool {
	am, as, _ := strings.Cut(a, "-")
	bm, bs, _ := strings.Cut(b, "-")
	ai, _ := strconv.ParseInt(am, 10, 64)
	bi, _ := strconv.ParseInt(bm, 10, 64)
	if ai != bi {
		return ai < bi
	}
	an, _ := strconv.ParseInt(as, 10, 64)
	bn, _ := strconv.ParseInt(bs, 10, 64)
	return an < bn
}

// streams are the streams events reads: lifecycle and the output streams.
func (c *ctl) streams(ctx context.Context, only []string) []string {
	ids := only
	out := []string{c.keys.Lifecycle()}
	if len(ids) == 0 {
		ids, _ = c.rdb.SMembers(ctx, c.keys.Workers()).Result()
		out = append(out, c.keys.DeveloperOutput())
	}
	for _, id := range ids {
		out = append(out, c.keys.Output(id))
	}
	return out
}

func (c *ctl) printEvent(ev spawner.Event) {
	if c.json {
		if ev.Err != nil {
			b, _ := json.Marshal(map[string]string{"stream": ev.Stream, "id": ev.ID, "error": ev.Err.Error()})
			fmt.Fprintln(c.out, string(b))
			return
		}
		fmt.Fprintln(c.out, string(ev.Data))
		return
	}
	ts, _, _ := strings.Cut(ev.ID, "-")
	ms, _ := strconv.ParseInt(ts, 10, 64)
	when := time.UnixMilli(ms).Format("15:04:05.000")
	if ev.Err != nil {
		fmt.Fprintf(c.out, "%s  %-8s  %-9s %s: %v\n", when, "-", "invalid", ev.Stream, ev.Err)
		return
	}
	w := shortID(ev.WorkerID())
	switch {
	case ev.Lifecycle != nil:
		l := ev.Lifecycle
		fmt.Fprintf(c.out, "%s  %-8s  lifecycle %-15s %s %s\n", when, w, l.Event, l.Source, l.RequestID)
	case ev.Progress != nil:
		p := ev.Progress
		pct := ""
		if p.ProgressPct != nil {
			pct = fmt.Sprintf(" %d%%", *p.ProgressPct)
		}
		fmt.Fprintf(c.out, "%s  %-8s  progress  %s %q%s %s\n", when, w, p.RequestID, p.Step, pct, p.Output)
	case ev.Output != nil:
		o := ev.Output
		detail := string(o.Result)
		switch {
		case o.Error != nil:
			detail = string(o.Error.Code) + ": " + o.Error.Message
		case o.Question != "":
			detail = strconv.Quote(o.Question)
		}
		fmt.Fprintf(c.out, "%s  %-8s  output    %s %s %s\n", when, w, o.RequestID, o.Status, detail)
	}
}

func (c *ctl) client() *spawner.Client {
	return &spawner.Client{Redis: c.rdb, Keys: c.keys, Timeout: 6 * time.Minute}
}

// do sends a command to the worker-managers; no answer within the timeout
// means no manager runs.
func (c *ctl) do(ctx context.Context, cmd protocol.Command, timeout time.Duration) (protocol.Reply, error) {
	cl := c.client()
	cl.Timeout = timeout
	r, err := cl.Do(ctx, cmd)
	var se *spawner.Error
	if errors.As(err, &se) && se.Code == protocol.CodeUpstreamUnavailable && strings.Contains(err.Error(), "no reply") {
		return r, fail(exitTimeout, "no worker-manager answered within %v (is one running on this Redis and prefix?)", timeout)
	}
	return r, err
}

func (c *ctl) spawn(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("spawn", flag.ContinueOnError)
	agent := fs.String("agent", "", "")
	kind := fs.String("kind", "", "")
	project := fs.String("project", "", "")
	instructions := fs.String("instructions", "", "")
	memory := fs.String("memory", "", "")
	cpus := fs.Float64("cpus", 0, "")
	timeout := fs.Duration("timeout", 6*time.Minute, "")
	var caps, allow, env multi
	fs.Var(&caps, "cap", "")
	fs.Var(&allow, "allow", "")
	fs.Var(&env, "env", "")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	spec := protocol.WorkerSpec{AgentType: protocol.AgentType(*agent), Kind: protocol.Kind(*kind), ProjectID: *project,
		AllowedCommands: allow, Limits: protocol.Limits{Memory: *memory, CPUs: *cpus}}
	for _, cp := range caps {
		spec.Capabilities = append(spec.Capabilities, protocol.Capability(strings.ToUpper(cp)))
	}
	if strings.HasPrefix(*instructions, "@") {
		b, err := os.ReadFile((*instructions)[1:])
		if err != nil {
			return fail(exitUsage, "spawn: -instructions: %v", err)
		}
		spec.Instructions = string(b)
	} else {
		spec.Instructions = *instructions
	}
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return fail(exitUsage, "spawn: -env %q: want NAME=VALUE", kv)
		}
		if spec.Env == nil {
			spec.Env = map[string]string{}
		}
		spec.Env[k] = v
	}
	if err := spec.Validate(); err != nil {
		return fail(exitUsage, "spawn: %v", err)
	}
	r, err := c.do(ctx, protocol.Command{Action: protocol.ActionCreate, Spec: &spec}, *timeout)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(r.Worker)
	}
	fmt.Fprintln(c.out, r.Worker.WorkerID)
	return nil
}

func (c *ctl) action(a protocol.Action) func(context.Context, []string) error {
	return func(ctx context.Context, args []string) error {
		fs := flag.NewFlagSet(map[protocol.Action]string{protocol.ActionPause: "pause", protocol.ActionUnpause: "resume",
			protocol.ActionDelete: "kill"}[a], flag.ContinueOnError)
		timeout := fs.Duration("timeout", time.Minute, "")
		pos, err := parse(fs, args, 1)
		if err != nil {
			return err
		}
		id, err := c.resolve(ctx, pos[0])
		if err != nil {
			return err
		}
		r, err := c.do(ctx, protocol.Command{Action: a, WorkerID: id}, *timeout)
		if err != nil {
			return err
		}
		if c.json {
			return c.printJSON(r)
		}
		fmt.Fprintf(c.out, "%s: %s done\n", id, fs.Name())
		return nil
	}
}

func (c *ctl) send(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("send", flag.ContinueOnError)
	project := fs.String("project", "", "")
	reqID := fs.String("id", "", "")
	newSession := fs.Bool("new-session", false, "")
	wait := fs.Bool("wait", false, "")
	timeout := fs.Duration("timeout", 10*time.Minute, "")
	pos, err := parse(fs, args, 2)
	if err != nil {
		return err
	}
	id, err := c.resolve(ctx, pos[0])
	if err != nil {
		return err
	}
	row, err := c.read(ctx, id)
	if err != nil {
		return err
	}
	if *reqID == "" {
		*reqID = fmt.Sprintf("cli-%d", time.Now().UnixNano())
	}
	if *project == "" {
		*project = row.ProjectID
	}
	task := protocol.Task{RequestID: *reqID, ProjectID: *project, Prompt: pos[1], ForceNewSession: *newSession}
	doc, err := task.Encode()
	if err != nil {
		return fail(exitUsage, "send: %v", err)
	}
	if _, err := protocol.DecodeTask(doc); err != nil {
		return fail(exitUsage, "send: %v", err)
	}
	kind := row.Kind
	if kind == "" {
		kind = protocol.KindLongLived
	}
	out := c.keys.OutputFor(kind, id)
	// Outputs after this point are the task's.
	last := "0-0"
	if m, err := c.rdb.XRevRangeN(ctx, out, "+", "-", 1).Result(); err == nil && len(m) == 1 {
		last = m[0].ID
	}
	if err := c.rdb.XAdd(ctx, &redis.XAddArgs{Stream: c.keys.InputFor(kind, id), Values: protocol.Values(doc)}).Err(); err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	if !*wait {
		if c.json {
			return c.printJSON(map[string]string{"request_id": *reqID, "worker_id": id})
		}
		fmt.Fprintln(c.out, *reqID)
		return nil
	}
	deadline := time.Now().Add(*timeout)
	for time.Now().Before(deadline) {
		res, err := c.rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{out, last}, Block: time.Second}).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return fail(exitFailed, "interrupted")
			}
			return fmt.Errorf("redis: %w", err)
		}
		for _, m := range res[0].Messages {
			last = m.ID
			ev := spawner.DecodeEvent(out, m)
			if ev.Progress != nil && ev.Progress.RequestID == *reqID && !c.json {
				c.printEvent(ev)
			}
			if ev.Output == nil || ev.Output.RequestID != *reqID {
				continue
			}
			return c.result(*ev.Output)
		}
	}
	return fail(exitTimeout, "no output for %s within %v", *reqID, *timeout)
}

func (c *ctl) result(o protocol.Output) error {
	if c.json {
		if err := c.printJSON(o); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "status\t%s\n", o.Status)
		if len(o.Result) > 0 {
			fmt.Fprintf(tw, "result\t%s\n", o.Result)
		}
		if o.Question != "" {
			fmt.Fprintf(tw, "question\t%s\n", o.Question)
		}
		if o.Error != nil {
			fmt.Fprintf(tw, "error\t%s: %s\n", o.Error.Code, o.Error.Message)
		}
		fmt.Fprintf(tw, "session\t%s\n", dash(o.SessionID))
		fmt.Fprintf(tw, "tokens\tin %d, out %d, cache read %d, cache write %d\n", o.Usage.Input, o.Usage.Output, o.Usage.CacheRead, o.Usage.CacheCreation)
		fmt.Fprintf(tw, "cost\t$%.4f\n", o.CostUSD)
		fmt.Fprintf(tw, "duration\t%v\n", time.Duration(o.DurationMS)*time.Millisecond)
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	switch o.Status {
	case protocol.StatusBlocked:
		return &exitError{exitBlocked, fmt.Errorf("task %s is blocked: %s", o.RequestID, o.Question)}
	case protocol.StatusFailed:
		msg := "failed"
		if o.Error != nil {
			msg = string(o.Error.Code) + ": " + o.Error.Message
		}
		return &exitError{exitTaskFail, fmt.Errorf("task %s failed: %s", o.RequestID, msg)}
	}
	return nil
}

// usageRow is a project's cumulative usage.
type usageRow struct {
	ProjectID     string  `json:"project_id"`
	Tasks         int64   `json:"tasks"`
	Input         int64   `json:"input"`
	Output        int64   `json:"output"`
	CacheRead     int64   `json:"cache_read"`
	CacheCreation int64   `json:"cache_creation"`
	CostUSD       float64 `json:"cost_usd"`
}

func (c *ctl) usage(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("usage", flag.ContinueOnError)
	var projects multi
	fs.Var(&projects, "project", "")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	if len(projects) == 0 {
		prefix := c.keys.UsageProject("")
		iter := c.rdb.Scan(ctx, 0, prefix+"*", 200).Iterator()
		for iter.Next(ctx) {
			projects = append(projects, strings.TrimPrefix(iter.Val(), prefix))
		}
		if err := iter.Err(); err != nil {
			return fmt.Errorf("redis: %w", err)
		}
		sort.Strings(projects)
	}
	rows := make([]usageRow, 0, len(projects))
	for _, p := range projects {
		h, err := c.rdb.HGetAll(ctx, c.keys.UsageProject(p)).Result()
		if err != nil {
			return fmt.Errorf("redis: %w", err)
		}
		n := func(f string) int64 { v, _ := strconv.ParseInt(h[f], 10, 64); return v }
		cost, _ := strconv.ParseFloat(h[protocol.UsageFieldCostUSD], 64)
		rows = append(rows, usageRow{ProjectID: p, Tasks: n(protocol.UsageFieldTasks), Input: n(protocol.UsageFieldInput),
			Output: n(protocol.UsageFieldOutput), CacheRead: n(protocol.UsageFieldCacheRead),
			CacheCreation: n(protocol.UsageFieldCacheCreation), CostUSD: cost})
	}
	if c.json {
		return c.printJSON(rows)
	}
	tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "PROJECT\tTASKS\tINPUT\tOUTPUT\tCACHE_READ\tCACHE_WRITE\tCOST_USD\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%.4f\t\n", r.ProjectID, r.Tasks, r.Input, r.Output, r.CacheRead, r.CacheCreation, r.CostUSD)
	}
	return tw.Flush()
}
