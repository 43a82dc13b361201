// Command workerctl shows and drives agentvisor workers from a shell, for
// operators and scripts. Each command is a file of this package
// (list.go, send.go, ...); what they print is in render.go.
//
// Tables are for people; --json prints JSON for scripts (one document, or
// one line per event). WORKER may be a unique prefix of a worker id.
// list, status, events, send, cancel, usage, budget and managers read
// Redis directly and work with no manager running; spawn, pause, resume, kill,
// reset-context, budget --limit and network are commands a worker-manager
// executes; volumes, gc and reconcile also talk to this host's Docker
// engine.
//
// Flags may be written -flag or --flag (the single dash of earlier
// releases still works). `workerctl completion bash|zsh|fish|powershell`
// prints a shell completion script; worker ids complete from Redis.
//
// Exit codes: 0 done (a task complete, or cancelled: the task ended as
// its owner asked); 1 failed (an error reply, Redis unreachable); 2 bad
// usage; 3 no such worker; 4 the task ended blocked; 5 the task ended
// failed; 6 timed out waiting; 7 Redis or the Docker engine unreachable
// (down); 8 no worker-manager alive (the command was not sent).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

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
	// exitUnreachable: Redis or the Docker engine did not answer (down).
	exitUnreachable = 7
	// exitNoManager: no worker-manager is alive to carry out a command
	// (nothing was sent).
	exitNoManager = 8
)

// exitError carries the exit code an error ends workerctl with.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func fail(code int, format string, args ...any) error {
	return &exitError{code, fmt.Errorf(format, args...)}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes one command line and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runWith(ctx, os.Stdin, args, stdout, stderr)
}

// runWith is run with the standard input given (down's question reads
// its answer there).
func runWith(ctx context.Context, stdin io.Reader, args []string, stdout, stderr io.Writer) int {
	c := &ctl{out: stdout}
	defer c.close()
	root := newRoot(c)
	root.SetArgs(longFlags(root, args))
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
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

// newRoot builds the command tree; c is filled from the global flags
// before any command runs.
func newRoot(c *ctl) *cobra.Command {
	root := &cobra.Command{
		Use:   "workerctl",
		Short: "Show and drive agentvisor workers",
		Long: `workerctl shows and drives agentvisor workers.

WORKER is a worker id or a unique prefix of one. REDIS_URL and
WORKER_KEY_PREFIX (default worker) set the defaults of --redis and
--prefix. Without either, workerctl uses the project's Redis
(scripts/redis.sh): REDIS_CONSUMER_URL of the environment or of
/var/lib/agentvisor/redis/credentials.env, and for the operations that
act as a manager (gc, reconcile, volumes) REDIS_MANAGER_URL. Flags may
be written -flag or --flag.

Exit codes: 0 done (a task complete or cancelled), 1 failed, 2 bad
usage, 3 no such worker, 4 task blocked, 5 task failed, 6 timed out,
7 Redis or the Docker engine unreachable (down), 8 no worker-manager
alive (nothing sent). A command a manager carries out (spawn, kill...)
carries its --timeout as a deadline: one no manager answered in time is
never carried out later.`,
		SilenceErrors: true,
		SilenceUsage:  true,
		// No command: the usage, and exit 2. An unknown one: exit 2 too.
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fail(exitUsage, "unknown command %q (see workerctl --help)", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			cmd.SetOut(cmd.ErrOrStderr())
			_ = cmd.Usage()
			return fail(exitUsage, "a command is needed")
		},
		// The completion scripts need no Redis (worker ids complete
		// through completeWorkers, which opens it).
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			if completing(cmd) {
				return nil
			}
			return c.open()
		},
	}
	pf := root.PersistentFlags()
	pf.StringVar(&c.redisURL, "redis", os.Getenv("REDIS_URL"), "the Redis of the workers (REDIS_URL; default: the project's, from its credentials file)")
	pf.StringVar(&c.prefix, "prefix", os.Getenv("WORKER_KEY_PREFIX"), "the key prefix of the workers (WORKER_KEY_PREFIX, default worker)")
	pf.BoolVar(&c.json, "json", false, "print JSON for scripts instead of tables")
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return fail(exitUsage, "%s: %v (see workerctl %s --help)", cmd.Name(), err, cmd.Name())
	})
	root.AddGroup(&cobra.Group{ID: "workers", Title: "Workers:"}, &cobra.Group{ID: "ops", Title: "Operations:"})
	for _, cmd := range []*cobra.Command{listCmd(c), statusCmd(c), eventsCmd(c), spawnCmd(c), sendCmd(c), cancelCmd(c),
		pauseCmd(c), resumeCmd(c), hibernateCmd(c), killCmd(c), usageCmd(c), budgetCmd(c), networkCmd(c)} {
		cmd.GroupID = "workers"
		root.AddCommand(cmd)
	}
	for _, cmd := range []*cobra.Command{managersCmd(c), reconcileCmd(c), resetContextCmd(c), gcCmd(c), volumesCmd(c), poolsCmd(c), downCmd(c)} {
		cmd.GroupID = "ops"
		root.AddCommand(cmd)
	}
	return root
}

// args checks a command's count of positional arguments (exit 2).
func args(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return fail(exitUsage, "%s: want %s, got %d argument(s) (see workerctl %s --help)", cmd.Name(), names, len(args), cmd.Name())
		}
		return nil
	}
}

// longFlags rewrites -name to --name for every long flag of the tree, so
// that the Go-style single dash of earlier releases keeps working (-json,
// -wait, -agent claude). Single letters stay shorthands (-f), and nothing
// after "--" is touched.
func longFlags(root *cobra.Command, args []string) []string {
	long := map[string]bool{"help": true}
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		for _, fs := range []*pflag.FlagSet{c.PersistentFlags(), c.LocalFlags()} {
			fs.VisitAll(func(f *pflag.Flag) { long[f.Name] = true })
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	out := make([]string, 0, len(args))
	for i, a := range args {
		if a == "--" {
			return append(out, args[i:]...)
		}
		if len(a) > 2 && a[0] == '-' && a[1] != '-' {
			name, _, _ := strings.Cut(a[1:], "=")
			if long[name] {
				a = "-" + a
			}
		}
		out = append(out, a)
	}
	return out
}

// completing reports whether cmd prints a completion script or answers a
// shell's completion request.
func completing(cmd *cobra.Command) bool {
	switch cmd.Name() {
	case cobra.ShellCompRequestCmd, cobra.ShellCompNoDescRequestCmd, "completion":
		return true
	}
	return cmd.HasParent() && cmd.Parent().Name() == "completion"
}
