package main

import (
	"context"
	"io"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/agentvisor/agentvisor/client"
	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/redisconn"
)

// ctl is what every command shares: the global flags and the Redis
// client made from them.
type ctl struct {
	redisURL, prefix string
	// managerURL is the project's manager URL when redisURL came from its
	// credentials file (neither --redis nor REDIS_URL given): the
	// operations that act as a manager use it.
	managerURL string
	json       bool
	patch      bool // send --patch: a task's output prints its git patch too
	out        io.Writer

	rdb  *redis.Client
	keys protocol.Keys
	wait protocol.WaitPolicy // WAIT for what it sends (REDIS_WAIT_*; one replica for a sentinel URL)
}

// open checks the global flags and makes the Redis client (it connects
// on first use).
func (c *ctl) open() error {
	if c.rdb != nil {
		return nil
	}
	keys, err := protocol.NewKeys(c.prefix)
	if err != nil {
		return fail(exitUsage, "--prefix: %v", err)
	}
	redisconn.SetLogger(nil) // go-redis's own lines (a sentinel's answer) are no output of the tool
	if c.redisURL == "" {
		if c.redisURL, err = redisconn.DefaultURL(redisconn.ConsumerURLName); err != nil {
			return fail(exitUsage, "--redis: %v", err)
		}
		c.managerURL, _ = redisconn.DefaultURL(redisconn.ManagerURLName)
	}
	opt, err := redisconn.Options(c.redisURL)
	if err != nil {
		return fail(exitUsage, "--redis: %v", err) // the parser's errors never quote the URL
	}
	if c.wait, err = redisconn.Policy(c.redisURL); err != nil {
		return fail(exitUsage, "%v", err)
	}
	c.keys, c.rdb = keys, redisconn.NewClient(opt)
	return nil
}

func (c *ctl) close() {
	if c.rdb != nil {
		c.rdb.Close()
	}
}

// resolve turns a worker id or unique prefix into the worker id.
func (c *ctl) resolve(ctx context.Context, arg string) (string, error) {
	ids, err := c.fleet().Workers(ctx)
	if err != nil {
		return "", err
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
	// History is the worker's last transitions, newest first (status).
	History []protocol.TransitionRecord `json:"history,omitempty"`
}

// read reads a worker's status hash and heartbeat.
func (c *ctl) read(ctx context.Context, id string) (workerRow, error) {
	ws, err := c.fleet().Worker(ctx, id)
	if client.IsNotFound(err) {
		return workerRow{}, fail(exitNotFound, "no worker %q", id)
	}
	if err != nil {
		return workerRow{}, err
	}
	row := workerRow{WorkerInfo: protocol.WorkerInfoFromStatus(id, ws.Hash), Heartbeat: ws.Heartbeat}
	row.CreatedAt, _ = protocol.ParseTime(ws.Hash[protocol.StatusFieldCreatedAt])
	return row, nil
}

// fleet reads the runtime's state from the ctl's Redis.
func (c *ctl) fleet() *client.Fleet { return &client.Fleet{Redis: c.rdb, Keys: c.keys} }

// do sends a command to the worker-managers: no manager alive fails at
// once (exit 8), no answer within the timeout exit 6; the command carries
// the timeout as its deadline, so that neither is carried out later.
func (c *ctl) do(ctx context.Context, cmd protocol.Command, timeout time.Duration) (protocol.Reply, error) {
	cl := &client.Commands{Redis: c.rdb, Keys: c.keys, Timeout: timeout, Wait: c.wait}
	r, err := cl.Do(ctx, cmd)
	switch {
	case client.IsNoManager(err):
		return r, &exitError{exitNoManager, err}
	case client.IsNoReply(err):
		return r, fail(exitTimeout, "no worker-manager answered within %v (its deadline passed: a manager that reads it now does not carry it out)", timeout)
	}
	return r, err
}

// completeWorkers completes a WORKER argument from the workers set.
func completeWorkers(c *ctl) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 || c.open() != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Second)
		defer cancel()
		ids, err := c.fleet().Workers(ctx)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveError
		}
		var out []cobra.Completion
		for _, id := range ids {
			if strings.HasPrefix(id, toComplete) {
				out = append(out, id)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// fixed completes a flag from a fixed list.
func fixed(values ...string) cobra.CompletionFunc {
	return cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp)
}
