package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"

	dockerengine "github.com/agentvisor/agentvisor/spawner/engine/docker"

	"github.com/spf13/cobra"

	"github.com/agentvisor/agentvisor/gateway"
	"github.com/agentvisor/agentvisor/redisconn"
	"github.com/agentvisor/agentvisor/spawner"
)

func downCmd(c *ctl) *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Remove every container, volume, Redis user and gateway directory of this prefix (a manager gone)",
		Long: `down is for a key prefix whose worker-manager is gone (a manager that
stops hibernates or removes its workers itself, unless KEEP_WORKERS). It removes, on
this host's engine, every container (killed) and project volume of the
prefix; the prefix's per-worker Redis users; and, when this host's
worker-gateway answers (GATEWAY_DIR), the socket directories of those
workers. It prints what it found and asks before it removes anything,
unless --yes; then it prints what it removed. Nothing else of Redis
changes: a manager started later retires the workers it finds gone.

Exit codes: 1 refused or a removal failed; 7 Redis or the Docker engine
did not answer (nothing removed).`,
		Args: args(0, "no argument"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.withEngine(cmd.Context(), func(e *engine) error { return c.down(cmd, e, yes) })
		},
	}
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "remove without asking")
	return cmd
}

func (c *ctl) down(cmd *cobra.Command, e *engine, yes bool) error {
	ctx := cmd.Context()
	rc := c.rdb
	if c.managerURL != "" {
		// Worker users are deleted with the manager's rights.
		opt, err := redisconn.Options(c.managerURL)
		if err != nil {
			return fail(exitUsage, "the manager's Redis URL: %v", err)
		}
		mc := redisconn.NewClient(opt)
		defer mc.Close()
		rc = mc
	}
	eng := dockerengine.New(e.dc, c.keys.Prefix, nil)
	eng.KeepDisks(dockerengine.Disks{Dir: e.cfg.DiskDir}) // the project volumes that are disks, and the workers' own
	d := &spawner.Down{Engine: eng, Redis: rc, Keys: c.keys, Gateway: gateway.NewClient(e.cfg.GatewayDir)}
	plan, err := d.PlanDown(ctx)
	if errors.Is(err, spawner.ErrEngineUnreachable) || errors.Is(err, spawner.ErrRedisUnreachable) {
		return fail(exitUnreachable, "down: nothing removed: %v", err)
	}
	if err != nil {
		return err
	}
	if plan.Empty() {
		if c.json {
			return printJSON(c.out, plan)
		}
		fmt.Fprintf(c.out, "nothing of prefix %q to remove\n", plan.Prefix)
		return nil
	}
	if !yes {
		renderDown(cmd.ErrOrStderr(), "will remove", plan)
		if !confirm(cmd.InOrStdin(), cmd.ErrOrStderr(), "Remove all of this?") {
			return fail(exitFailed, "down: not confirmed: nothing removed (--yes to skip the question)")
		}
	}
	done, err := d.Execute(ctx, plan)
	if c.json {
		_ = printJSON(c.out, done)
	} else {
		renderDown(c.out, "removed", done)
	}
	if errors.Is(err, spawner.ErrRedisUnreachable) {
		return fail(exitUnreachable, "down: %v", err)
	}
	return err
}

// confirm asks a yes/no question on w and reads the answer from r (no
// answer is no).
func confirm(r io.Reader, w io.Writer, question string) bool {
	fmt.Fprintf(w, "%s [y/N] ", question)
	line, _ := bufio.NewReader(r).ReadString('\n')
	answer := strings.ToLower(strings.TrimSpace(line))
	return answer == "y" || answer == "yes"
}

// renderDown prints a down plan (verb: "will remove" or "removed").
func renderDown(w io.Writer, verb string, p spawner.DownPlan) {
	fmt.Fprintf(w, "prefix %q: %s %d container(s), %d volume(s), %d Redis user(s), %d gateway directory(ies)\n", p.Prefix, verb,
		len(p.Containers), len(p.Volumes), len(p.RedisUsers), len(p.GatewayDirs))
	for _, ct := range p.Containers {
		what := "worker " + ct.WorkerID
		if ct.WorkerID == "" {
			what = ct.Role
		}
		fmt.Fprintf(w, "  container  %s  (%s, %s)\n", ct.Name, what, ct.State)
	}
	for _, v := range p.Volumes {
		fmt.Fprintf(w, "  volume     %s\n", v)
	}
	for _, id := range p.RedisUsers {
		fmt.Fprintf(w, "  redis user %s\n", id)
	}
	for _, id := range p.GatewayDirs {
		fmt.Fprintf(w, "  gateway    %s\n", id)
	}
	if p.GatewayError != "" {
		fmt.Fprintf(w, "  (the gateway was not asked: %s; its directories are left)\n", p.GatewayError)
	}
}
