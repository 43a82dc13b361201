package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/agentvisor/agentvisor/gateway"
	"github.com/agentvisor/agentvisor/protocol"
)

// The demo's two services, run as the binaries `make demo` built: the
// worker-gateway of the sealed workers and the worker-manager.

func (d *demo) logPath() string { return filepath.Join(d.logDir, "worker-manager.log") }

// gatewayDir is where the demo's gateway keeps its sockets (short: a unix
// socket's path has at most 107 bytes).
func (d *demo) gatewayDir() string { return filepath.Join(d.logDir, "gw") }

// startGateway starts the host's worker-gateway for the sealed workers:
// their Redis (this demo's) and their model API (the stub, or Anthropic's)
// through sockets, nothing else.
func (d *demo) startGateway(ctx context.Context) (*exec.Cmd, error) {
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
	creds := filepath.Join(d.logDir, "gateway-credentials.json")
	if err := d.git.writeCredentials(creds, projectShop, projectBranch); err != nil {
		return nil, err
	}
	logPath := filepath.Join(d.logDir, "worker-gateway.log")
	cmd, err := startProcess(d.gatewayBin, logPath, "GATEWAY_DIR="+d.gatewayDir(), "GATEWAY_REDIS="+u.Addrs[0], "GATEWAY_MODEL="+model,
		"GATEWAY_CREDENTIALS_FILE="+creds, "GATEWAY_UPSTREAM_CA="+d.git.caFile)
	if err != nil {
		return nil, err
	}
	// The manager's first create asks it for sockets: wait for its control socket.
	err = poll(ctx, 50*time.Millisecond, 10*time.Second, func() (bool, error) {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := gateway.NewClient(d.gatewayDir()).Workers(cctx)
		return err == nil, nil
	})
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if errors.Is(err, errTimedOut) {
			return nil, fmt.Errorf("the worker-gateway did not answer within 10 s; its log: %s", logPath)
		}
		return nil, err
	}
	d.tl.say("worker-gateway started (pid %d): the workers are sealed, no network of their own; Redis (%s) and the model (%s) through its sockets in %s",
		cmd.Process.Pid, u.Addrs[0], model, d.gatewayDir())
	d.tl.say("the gateway holds the git host's token (GATEWAY_CREDENTIALS_FILE, mode 0600, for projects %s and %s) and trusts its CA (GATEWAY_UPSTREAM_CA)", projectShop, projectBranch)
	return cmd, nil
}

func (d *demo) startManager(env []string) (*exec.Cmd, error) {
	if err := os.MkdirAll(d.logDir, 0o755); err != nil {
		return nil, err
	}
	cmd, err := startProcess(d.managerBin, d.logPath(), env...)
	if err != nil {
		return nil, err
	}
	d.tl.say("worker-manager started (pid %d, log %s)", cmd.Process.Pid, d.logPath())
	// Its presence in Redis first: a command sent before it would be
	// refused NO_MANAGER (nothing is queued for a manager not yet alive).
	err = poll(context.Background(), 100*time.Millisecond, time.Minute, func() (bool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		n, err := d.rdb.Exists(ctx, d.keys.ManagerState(managerID)).Result()
		return err == nil && n == 1, nil
	})
	if err != nil {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		return nil, fmt.Errorf("the worker-manager wrote no presence within a minute (see %s): %w", d.logPath(), err)
	}
	return cmd, nil
}

// startProcess starts bin with the demo's environment and env, its output
// to logPath. Should the demo die, the process gets SIGTERM: the manager
// then removes the workers.
func startProcess(bin, logPath string, env ...string) (*exec.Cmd, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	return cmd, nil
}

// errTimedOut is poll's error when its timeout passed first.
var errTimedOut = errors.New("demo: timed out")

// poll calls check every interval until it reports done or fails, ctx
// ends (ctx.Err()), or timeout passes (errTimedOut). Every wait of the
// demo for something it cannot be told of is one: Ctrl-C ends each.
func poll(ctx context.Context, interval, timeout time.Duration, check func() (done bool, err error)) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		done, err := check()
		if done || err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return errTimedOut
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
