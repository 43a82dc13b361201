// Command worker-wrapper is PID 1 (the ENTRYPOINT) of every worker image.
// It runs the worker's agent CLI (Claude Code, Factory Droid, OpenAI
// Codex, OpenCode, Qwen Code, or any agent that speaks ACP) for each task
// it reads from Redis, reaps every process the agent leaves behind, and
// speaks the protocol (github.com/agentvisor/agentvisor/protocol). It
// also runs outside a container, as a child subreaper.
//
//	worker-wrapper                  serve tasks (configuration from the environment)
//	worker-wrapper progress --step "Running tests" --pct 50
//	                                report progress from the agent's shell tool
//
// Signals: SIGTERM or SIGINT stops taking tasks and gives the running task
// SHUTDOWN_GRACE to finish; then its process group gets SIGTERM, and
// SIGKILL after KILL_GRACE. A second SIGTERM or SIGINT cuts the grace
// short. SIGHUP is forwarded to the agent's process group.
//
// Exit codes: 0 after a clean shutdown; 2 for a configuration error (the
// message names the variable); 127 when the agent's program does not
// exist, 126 when it cannot be executed; 1 for any other failure.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/agentvisor/agentvisor/wrapper/internal/rdb"
	"github.com/agentvisor/agentvisor/wrapper/logsink"
	"github.com/agentvisor/agentvisor/wrapper/reaper"
	"github.com/agentvisor/agentvisor/wrapper/seal"
	"github.com/agentvisor/agentvisor/wrapper/worker"
)

func main() { os.Exit(run()) }

// run is the wrapper as tini's main is: parse → seal → configure → reap
// → signals → serve → exit (or become the adopted worker).
func run() int {
	if len(os.Args) > 1 {
		return subcommand(os.Args[1], os.Args[2:])
	}
	// The log never blocks the wrapper: nobody reads a container's stderr
	// while its engine restarts (logsink).
	sink := logsink.New(os.Stderr, 0)
	defer sink.Close(2 * time.Second)
	log := newLogger(sink)

	// Before anything else: the agent, under the same uid, must find no
	// secret in this process (its environ, memory, descriptors). Seal
	// re-executes the wrapper with a scrubbed environment and returns the
	// whole one; the configuration comes from it, never from os.Getenv.
	environ, err := seal.Seal()
	if err != nil {
		log.Error("cannot hide the configuration from the agent", "err", err)
		return 1
	}
	cfg, err := worker.FromEnv(seal.Getenv(environ))
	if err != nil {
		log.Error("invalid configuration", "err", err)
		return 2
	}
	if self, err := os.Executable(); err == nil {
		cfg.SelfPath = self
	}

	// Reap from the start: whatever the agent leaves behind comes back here.
	r, stopReaping := startReaper(log)
	defer stopReaping()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)

	w, err := worker.New(cfg, worker.Options{Logger: log, Starter: r, Sweeper: r, Environ: environ})
	if err != nil {
		log.Error("invalid configuration", "err", err)
		return 2
	}
	defer w.Close()
	if err := cfg.ResolveAgent(); err != nil {
		code := 1
		var ee *worker.ExitError
		if errors.As(err, &ee) {
			code = ee.Code
		}
		log.Error("cannot run the agent", "err", err, "exit_code", code)
		w.Fail(err, code, 2*time.Second)
		return code
	}

	ctx := handleSignals(sigs, w, log, cfg.ShutdownGrace)
	if err := w.Run(ctx); err != nil {
		log.Error("worker failed", "err", err)
		w.Fail(err, 1, 2*time.Second)
		return 1
	}
	if a := w.Adopted(); a != nil && ctx.Err() == nil { // (a stop asked meanwhile is a stop: no re-execution)
		w.Close()
		stopReaping()
		return becomeAdopted(a, environ, r, sink, log)
	}
	log.Info("exit", "orphans_reaped", r.Orphans())
	return 0
}

// subcommand runs `worker-wrapper <name> args...` and returns its exit
// code.
func subcommand(name string, args []string) int {
	switch name {
	case "progress":
		return worker.ProgressCommand(args, os.Getenv, os.Stdout, os.Stderr)
	case "guard": // Droid's PreToolUse hook: may this command run?
		return worker.GuardCommand(os.Stdin, os.Getenv, os.Stderr)
	case "-h", "--help", "help":
		fmt.Println("usage: worker-wrapper            (serve tasks; configuration from the environment)\n       worker-wrapper progress --step TEXT [--pct N] [--total N] [--output TEXT]\n       worker-wrapper guard           (Droid's PreToolUse hook; reads the hook's JSON on stdin)")
		return 0
	default:
		fmt.Fprintf(os.Stderr, "worker-wrapper: unknown command %q\n", name)
		return 2
	}
}

// newLogger is the wrapper's log: JSON lines to sink, at LOG_LEVEL, and
// go-redis's own messages with them.
func newLogger(sink *logsink.Sink) *slog.Logger {
	level := slog.LevelInfo
	if strings.EqualFold(os.Getenv("LOG_LEVEL"), "debug") {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewJSONHandler(sink, &slog.HandlerOptions{Level: level}))
	rdb.SetLogger(log)
	return log
}

// startReaper makes the wrapper the reaper of every orphan below it and
// reaps until stop.
func startReaper(log *slog.Logger) (r *reaper.Reaper, stop func()) {
	if err := reaper.BecomeSubreaper(); err != nil {
		log.Warn("cannot become a child subreaper; orphans go to the system's init", "err", err)
	}
	r = reaper.New()
	ctx, stop := context.WithCancel(context.Background())
	go r.Run(ctx)
	return r, stop
}

// handleSignals turns the signals into the worker's shutdown: the first
// SIGTERM or SIGINT ends the returned context (no new task; the running
// one gets grace, then Terminate), a second one terminates at once;
// SIGHUP goes to the agent's process group.
func handleSignals(sigs <-chan os.Signal, w *worker.Worker, log *slog.Logger, grace time.Duration) context.Context {
	ctx, shutdown := context.WithCancel(context.Background())
	go func() {
		stopping := false
		for sig := range sigs {
			switch {
			case sig == syscall.SIGHUP:
				w.ForwardSignal(syscall.SIGHUP)
			case !stopping:
				stopping = true
				log.Info("shutting down: no new tasks; the running task has the grace period", "signal", sig.String(), "grace", grace)
				shutdown()
				time.AfterFunc(grace, w.Terminate)
			default:
				log.Info("second signal: stopping the running task now", "signal", sig.String())
				w.Terminate()
			}
		}
	}()
	return ctx
}

// becomeAdopted re-executes the wrapper as the worker a woke in this
// container: the same process (PID 1) starts again as that worker, its
// configuration handed over as at any start (seal), never through the
// process's environment. Every other process of the container goes
// first: nothing of this worker's uid runs while the new image is not yet
// sealed. It returns only when the re-execution failed.
func becomeAdopted(a *worker.Adoption, environ []string, r *reaper.Reaper, sink *logsink.Sink, log *slog.Logger) int {
	log.Info("re-executing as the adopted worker", "worker_id", a.WorkerID)
	if os.Getpid() == 1 {
		_ = syscall.Kill(-1, syscall.SIGKILL) // PID 1 of its namespace: every process but itself
		if !r.ReapAll(time.Second) {
			log.Warn("processes of the container not yet gone after a second; the new image reaps them")
		}
	}
	sink.Close(2 * time.Second)
	err := seal.Reexec(worker.AdoptedEnviron(environ, a))
	fmt.Fprintf(os.Stderr, "worker-wrapper: re-execute as worker %s: %v\n", a.WorkerID, err)
	return 1
}
