// Command worker-manager is the spawner as a service: it executes the
// commands of worker:commands (create, delete, status, pause, unpause,
// list, reset_context) and answers on the stream each names, pauses the
// workers that ask for it, wakes paused workers that have input, forwards
// crashes, and collects stale worker images daily. Configuration comes
// from the environment (see spawner/README.md).
//
// It serves Prometheus metrics at /metrics and the live dashboard at / on
// METRICS_ADDR (127.0.0.1:9464; off to disable), and keeps its state in
// Redis for `workerctl managers`.
//
// SIGTERM or SIGINT: stop reading commands, finish those in flight, then
// hibernate the long-lived workers of this host (their identity kept: the
// next task to each wakes it under a running manager) and remove the
// others (set KEEP_WORKERS=true to leave them all running).
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agentvisor/agentvisor/spawner/ops"

	"github.com/agentvisor/agentvisor/spawner/images"

	dockerengine "github.com/agentvisor/agentvisor/spawner/engine/docker"
	kubeengine "github.com/agentvisor/agentvisor/spawner/engine/kubernetes"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/gateway"
	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/redisconn"
	"github.com/agentvisor/agentvisor/spawner"
	"github.com/agentvisor/agentvisor/spawner/dashboard"
	spawnerrdb "github.com/agentvisor/agentvisor/spawner/internal/rdb"
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "-h", "--help", "help":
			fmt.Print(spawner.Usage())
			return
		}
		fmt.Fprintf(os.Stderr, "worker-manager: no arguments (got %q); configuration is the environment's: worker-manager --help\n", os.Args[1])
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := run(ctx, os.Getenv, slog.New(slog.NewJSONHandler(os.Stderr, nil)))
	stop()
	os.Exit(code)
}

// run serves until ctx ends, configured by getenv, and returns the exit
// code.
func run(ctx context.Context, getenv func(string) string, log *slog.Logger) int {
	cfg, err := spawner.ConfigFromEnv(getenv)
	if err != nil {
		log.Error("invalid configuration", "err", err)
		return 2
	}
	oc, err := spawner.OpsConfigFromEnv(getenv)
	if err != nil {
		log.Error("invalid configuration", "err", err)
		return 2
	}
	ec, err := spawner.EngineConfigFromEnv(getenv)
	if err != nil {
		log.Error("invalid configuration", "err", err)
		return 2
	}
	if ec.Engine != spawner.EngineKubernetes && cfg.DiskLimit > 0 {
		if err := dockerengine.CheckDisks(ctx, cfg.DiskDir); err != nil {
			log.Error("invalid configuration", "err", fmt.Errorf("config: WORKER_DISK_LIMIT: %w (WORKER_DISK_DIR=%s; WORKER_DISK_LIMIT=0 runs workers without a disk limit)", err, cfg.DiskDir))
			return 2
		}
	}
	redisconn.SetLogger(log)
	opt, err := redisconn.Options(cfg.RedisURL) // checked by ConfigFromEnv; a sentinel URL gives a failover client
	if err != nil {
		log.Error("invalid configuration", "err", fmt.Errorf("config: REDIS_URL: %w", err))
		return 2
	}
	// Every new connection (a failover, a restart) tells the spawner,
	// whose leader then makes again the worker users the server lacks.
	var sp atomic.Pointer[spawner.Spawner]
	opt.OnConnect = func(context.Context, *redis.Conn) error {
		if s := sp.Load(); s != nil {
			s.RedisConnected()
		}
		return nil
	}
	rdb := redisconn.NewClient(opt)
	defer rdb.Close()
	warnIfOpen(ctx, opt, log)
	warnIfNoGateway(ctx, cfg, log)
	dc, err := dockerengine.Dial(context.Background())
	if err != nil {
		log.Error("docker client", "err", err)
		return 1
	}
	defer dc.Close()
	dockerengine.WarnIfNoLiveRestore(ctx, dc, log)
	if cfg.Runtime == protocol.RuntimeGVisor && ec.Engine != spawner.EngineKubernetes {
		dockerengine.WarnIfNoRuntime(ctx, dc, cfg.GVisorRuntime, log)
	}
	builder := &images.Builder{Docker: dc, Redis: rdb, Keys: cfg.Keys, BaseImage: cfg.BaseImage}
	s, err := newSpawner(ec, cfg, dc, rdb, builder, log)
	if err != nil {
		log.Error("worker engine", "engine", ec.Engine, "err", err)
		return 1
	}
	sp.Store(s)
	gc := &images.GC{Docker: dc, Redis: rdb, Keys: cfg.Keys, Log: log, PruneBuildCache: cfg.PruneBuildCache,
		Retention: oc.GCRetention, Interval: oc.GCInterval, DryRun: oc.GCDryRun}
	m := &spawner.Manager{S: s, GC: gc}

	if oc.MetricsAddr != "" {
		if srv := serveOps(s, builder, rdb, cfg, oc, log); srv != nil {
			defer srv.Close()
		}
	}
	log.Info("worker-manager started", "manager_id", cfg.ManagerID, "max_workers", cfg.MaxWorkers)
	if err := m.Run(ctx); err != nil {
		log.Error("manager failed", "err", err)
		return 1
	}
	if oc.KeepWorkers {
		return 0
	}
	return stop(s, cfg, oc, log)
}

// dockerClient is what of the Docker client the engines and the image
// import use.
type dockerClient interface {
	dockerengine.Client
	images.Saver
}

// newSpawner returns the spawner over the engine ec names: the host's
// Docker engine, or a Kubernetes cluster (the images are still built by
// the Docker engine beside the manager, and imported into the cluster's
// containerd with K8S_LOAD_IMAGES).
func newSpawner(ec spawner.EngineConfig, cfg spawner.Config, dc dockerClient, rdb redis.UniversalClient, builder *images.Builder, log *slog.Logger) (*spawner.Spawner, error) {
	if ec.Engine != spawner.EngineKubernetes {
		return spawner.NewDocker(cfg, dc, rdb, builder, log), nil
	}
	kc, err := kubeengine.Dial(ec.Kubeconfig)
	if err != nil {
		return nil, err
	}
	tolerations, err := kubeengine.Tolerations(ec.Tolerations)
	if err != nil {
		return nil, err
	}
	p := kubeengine.Params{Client: kc, Namespace: ec.Namespace, Prefix: cfg.Keys.Prefix, StorageClass: ec.StorageClass, VolumeSize: ec.VolumeSize,
		NodeSelector: ec.NodeSelector, Tolerations: tolerations, RuntimeClassName: ec.RuntimeClass, ServiceAccount: ec.ServiceAccount, Log: log}
	if ec.LoadImages != "" {
		// One node's containerd, or several: each image goes into every
		// one, in order, before its first pod.
		var loads []func(context.Context, string) error
		for _, sock := range strings.Split(ec.LoadImages, ",") {
			if sock = strings.TrimSpace(sock); sock != "" {
				loads = append(loads, images.ContainerdImport(dc, sock))
			}
		}
		p.LoadImage = func(ctx context.Context, image string) error {
			for _, load := range loads {
				if err := load(ctx, image); err != nil {
					return err
				}
			}
			return nil
		}
	}
	log.Info("workers run on kubernetes", "namespace", ec.Namespace, "kubeconfig", ec.Kubeconfig)
	return spawner.New(cfg, kubeengine.New(p), rdb, builder, log), nil
}

// serveOps serves /metrics and the dashboard on METRICS_ADDR and counts
// the image builds. An address in use (a second manager on this host with
// the default) costs the metrics, not the workers: the manager runs on
// and says so (nil: not served).
func serveOps(s *spawner.Spawner, builder *images.Builder, rdb redis.UniversalClient, cfg spawner.Config, oc spawner.OpsConfig, log *slog.Logger) io.Closer {
	metrics := spawner.NewMetrics(rdb, cfg.Keys, oc.MetricsMaxProjects)
	rdb.AddHook(metrics.RedisHook())
	builder.OnBuild = metrics.ImageBuilt
	page := (&dashboard.Dashboard{Redis: rdb, Keys: cfg.Keys, Log: log}).Handler()
	token, tokenFile, err := opsToken(cfg, oc)
	if err != nil {
		log.Error("metrics endpoint not served: this manager runs without /metrics and the dashboard (set OPS_TOKEN_FILE, or an OPS_TOKEN_OUT it can write)",
			"err", err)
		return nil
	}
	srv, addr, err := ops.Serve(oc.MetricsAddr, metrics.Registry, page, token, log)
	if err != nil {
		log.Error("metrics endpoint not served: this manager runs without /metrics and the dashboard (set METRICS_ADDR)",
			"err", err, "addr", oc.MetricsAddr)
		return nil
	}
	s.UseMetrics(metrics, addr)
	if tokenFile != "" {
		// The file, never the token: a log is often readable by every
		// user of the host, and the token is full control of the
		// dashboard.
		log.Info("metrics and dashboard (their token was made at start and written to token_file, mode 0600: set OPS_TOKEN_FILE for a lasting one)",
			"url", "http://"+addr+"/login?token=<token of token_file>", "metrics", "http://"+addr+"/metrics (Authorization: Bearer <token>)",
			"token_file", tokenFile)
	} else {
		log.Info("metrics and dashboard (the operator token of OPS_TOKEN or OPS_TOKEN_FILE)",
			"url", "http://"+addr+"/login?token=<token>", "metrics", "http://"+addr+"/metrics (Authorization: Bearer <token>)")
	}
	return srv
}

// opsToken is the operator token: OPS_TOKEN's or OPS_TOKEN_FILE's, or
// one made now and written to OPS_TOKEN_OUT, whose path it returns then.
func opsToken(cfg spawner.Config, oc spawner.OpsConfig) (token, file string, err error) {
	if oc.OpsToken != "" {
		return oc.OpsToken, "", nil
	}
	file = oc.OpsTokenOut
	if file == "" {
		if file, err = spawner.DefaultOpsTokenOut(cfg); err != nil {
			return "", "", err
		}
	}
	token = ops.NewToken()
	if err := ops.WriteTokenFile(file, token); err != nil {
		return "", "", fmt.Errorf("config: OPS_TOKEN_OUT: %w", err)
	}
	return token, file, nil
}

// stop hibernates or removes every worker of this manager, and its
// project volumes with REMOVE_VOLUMES_AT_STOP; it returns the exit code.
func stop(s *spawner.Spawner, cfg spawner.Config, oc spawner.OpsConfig, log *slog.Logger) int {
	sctx, cancel := context.WithTimeout(context.Background(), cfg.StopTimeout+30*time.Second)
	defer cancel()
	start := time.Now()
	if err := s.Shutdown(sctx); err != nil {
		log.Error("shutdown: workers left", "err", err)
		return 1
	}
	log.Info("shutdown: every worker hibernated or removed", "took", time.Since(start).String())
	if oc.RemoveVolumesAtStop {
		removed, err := s.RemoveVolumes(sctx)
		if err != nil {
			log.Error("shutdown: project volumes left", "removed", len(removed), "err", err)
			return 1
		}
		log.Info("shutdown: project volumes removed", "volumes", len(removed))
	}
	return 0
}

// warnIfOpen logs a warning when the manager's Redis lets a client in
// without credentials: then anyone who reaches it (an agent in a worker
// among them) can read and forge every worker's keys, whatever the
// per-worker users allow. scripts/redis.sh starts Redis with the default
// user off. A Redis that does not answer yet is the manager's own
// business (it waits for it): nothing is logged then.
func warnIfOpen(ctx context.Context, opt *redis.UniversalOptions, log *slog.Logger) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	open, err := spawnerrdb.OpenToAnyone(cctx, opt)
	if err != nil {
		log.Debug("redis: could not check whether it requires a password", "err", err)
		return
	}
	if open {
		log.Warn("redis lets anyone in without a password: any process that reaches it (an agent in a worker too) can read and forge every worker's data; "+
			"turn the default user off or set a password (scripts/redis.sh does both for the project's Redis)", "addrs", opt.Addrs)
	}
}

// warnIfNoGateway logs a warning when workers are not sealed (an opt-in
// to less isolation), and an error when they are (the default) and
// this host's gateway does not answer on its control socket: every create
// is refused (UPSTREAM_UNAVAILABLE) until worker-gateway runs. The manager
// starts anyway: the gateway may come up after it, and the workers it
// already has keep their sockets (the gateway serves them, not the manager).
func warnIfNoGateway(ctx context.Context, cfg spawner.Config, log *slog.Logger) {
	if cfg.NetworkMode != spawner.NetworkSealed {
		log.Warn("workers are not sealed (WORKER_NETWORK_MODE="+cfg.NetworkMode+"): an agent reaches whatever that network reaches (with host, every loopback service of this host); "+
			"sealed, the default, gives it the gateway's sockets only", "network_mode", cfg.NetworkMode)
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := gateway.NewClient(cfg.GatewayDir).Workers(cctx); err != nil {
		log.Error("workers are sealed (WORKER_NETWORK_MODE=sealed, the default) and this host's gateway does not answer: creates fail until worker-gateway runs with GATEWAY_DIR="+cfg.GatewayDir+
			" (or set WORKER_NETWORK_MODE=host to give workers the host's network)", "gateway_dir", cfg.GatewayDir, "err", err)
	}
}
