// Command worker-gateway serves the sockets of sealed workers on this
// host (package gateway): a directory of unix sockets per worker under
// GATEWAY_DIR, each relayed to the upstream Redis or model API, and the
// control socket the worker manager opens and closes workers on; and
// each worker's egress.sock, an HTTP proxy to the hosts its allowlist and
// GATEWAY_ALLOW name. It runs
// beside the Docker engine, apart from the manager, so that the manager's
// restarts do not cut the workers' connections; started again (even after
// SIGKILL) it serves every worker it served before. SIGHUP reads the
// credentials file (GATEWAY_CREDENTIALS_FILE) again.
//
// Configuration comes from the environment (gateway/README.md); it logs
// JSON lines on stderr. SIGTERM or SIGINT closes every socket and
// connection and leaves the workers' directories for the next start.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/agentvisor/agentvisor/envconf"
	"github.com/agentvisor/agentvisor/gateway"
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "-h", "--help", "help":
			var c config
			fmt.Print(envconf.Usage("worker-gateway", "the sealed workers' only way out of their containers: Redis, the model API and allowed egress over unix sockets (see gateway/README.md)", configVars(&c)))
			return
		}
		fmt.Fprintf(os.Stderr, "worker-gateway: no arguments (got %q); configuration is the environment's: worker-gateway --help\n", os.Args[1])
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := run(ctx, os.Getenv, os.Stderr)
	stop()
	os.Exit(code)
}

// config is the gateway binary's configuration; configVars is its table
// (each Doc in Markdown: the Meaning of its row in docs/configuration.md,
// which TestConfigTables generates from it).
type config struct {
	Dir       string
	Redis     string
	Model     string
	MaxConns  int
	WorkerUID int
	Allow     []string
	Creds     string
	// UpstreamCA is a PEM file of CA certificates trusted for a
	// credentialed request's upstream besides the system's roots.
	UpstreamCA string
	LogLevel   string
}

// DefaultDir is GATEWAY_DIR's default.
const DefaultDir = "/run/agentvisor/gateway"

func configVars(c *config) []envconf.Var {
	return []envconf.Var{
		{Name: "GATEWAY_DIR", Default: DefaultDir, Value: envconf.String(&c.Dir),
			Doc: "where `control.sock` and a directory of sockets per worker are"},
		{Name: "GATEWAY_REDIS", Required: true, Value: envconf.Func(redisUpstream(&c.Redis)),
			Doc: "the upstream Redis, `host:port`, or a `redis+sentinel://` URL (sentinels, master name, the sentinels' credentials only): what every worker's `redis.sock` is relayed to; for a sentinel URL, the primary the sentinels name at each connection"},
		{Name: "GATEWAY_MODEL", Value: envconf.Func(modelUpstream(&c.Model)),
			Doc: "the upstream model API, `host:port` (HTTPS, the server verified), or an `https://` or `http://` URL of scheme and host (`http`: a model server on this host, such as a test's stub): where every worker's `model.sock` forwards the requests that carry the worker's token; unset: no `model.sock`"},
		{Name: "GATEWAY_WORKER_UID", Default: fmt.Sprint(gateway.DefaultWorkerUID), Value: envconf.Int(&c.WorkerUID, 1),
			Doc: "the uid the workers' containers run as: it owns every worker socket (mode 0600), so that only it and root can connect (the gateway must run as root, or as that uid)"},
		{Name: "GATEWAY_MAX_CONNS", Default: fmt.Sprint(gateway.DefaultMaxConns), Value: envconf.Int(&c.MaxConns, 1),
			Doc: "connections one worker may hold open at once; more are closed at once"},
		{Name: "GATEWAY_ALLOW", Value: envconf.Func(allowList(&c.Allow)),
			Doc: "the operator's egress allowlist, comma-separated, in force for every worker besides its own; empty: none"},
		{Name: "GATEWAY_CREDENTIALS_FILE", Value: envconf.String(&c.Creds),
			Doc: "a JSON file of credentials the gateway adds to workers' requests ([gateway/README.md](../gateway/README.md#credentials)); mode 0600 or the gateway refuses to start; read again on SIGHUP and when it changes; empty: none"},
		{Name: "GATEWAY_UPSTREAM_CA", Value: envconf.Func(upstreamCA(&c.UpstreamCA)),
			Doc: "a PEM file of CA certificates trusted, besides the system's, for the HTTPS the gateway speaks to a credentialed host (a private git host or registry) and to the model API; empty: the system's alone"},
		{Name: "LOG_LEVEL", Default: "info", Value: envconf.Enum(&c.LogLevel, "debug", "info", "warn", "error"),
			Doc: "`debug`, `info`, `warn` or `error`; JSON lines on stderr"},
	}
}

// modelUpstream checks GATEWAY_MODEL (gateway.ParseModel) into p.
func modelUpstream(p *string) func(string) error {
	return func(s string) error {
		if _, err := gateway.ParseModel(s); err != nil {
			return err
		}
		*p = s
		return nil
	}
}

// redisUpstream checks GATEWAY_REDIS (gateway.ParseRedis) into p.
func redisUpstream(p *string) func(string) error {
	return func(s string) error {
		if _, err := gateway.ParseRedis(s); err != nil {
			return err
		}
		*p = s
		return nil
	}
}

// allowList parses a comma-separated egress allowlist into p.
func allowList(p *[]string) func(string) error {
	return func(s string) error {
		l := envconf.ParseList(s)
		if err := gateway.ParseAllow(l); err != nil {
			return err
		}
		*p = l
		return nil
	}
}

// upstreamCA checks GATEWAY_UPSTREAM_CA (a readable PEM file with at
// least one certificate) into p.
func upstreamCA(p *string) func(string) error {
	return func(s string) error {
		if _, err := upstreamRoots(s); err != nil {
			return err
		}
		*p = s
		return nil
	}
}

// upstreamRoots is the system's roots and the CA certificates of the PEM
// file at path.
func upstreamRoots(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	roots, err := x509.SystemCertPool()
	if err != nil {
		roots = x509.NewCertPool() // no system roots here: the file's alone
	}
	if !roots.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s: no PEM certificate in it", path)
	}
	return roots, nil
}

// upstreamTLS is gateway.Config.UpstreamTLS for GATEWAY_UPSTREAM_CA: nil
// (the system's roots) when it is unset.
func upstreamTLS(path string) (*tls.Config, error) {
	if path == "" {
		return nil, nil
	}
	roots, err := upstreamRoots(path)
	if err != nil {
		return nil, fmt.Errorf("config: GATEWAY_UPSTREAM_CA: %w", err)
	}
	return &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}, nil
}

func configFromEnv(getenv func(string) string) (config, error) {
	var c config
	err := envconf.Load(getenv, configVars(&c))
	return c, err
}

// run serves until ctx ends, configured by getenv and logging to stderr,
// and returns the exit code.
func run(ctx context.Context, getenv func(string) string, stderr io.Writer) int {
	c, err := configFromEnv(getenv)
	if err != nil {
		slog.New(slog.NewJSONHandler(stderr, nil)).Error("invalid configuration", "err", err)
		return 2
	}
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.LogLevel))
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))
	upTLS, err := upstreamTLS(c.UpstreamCA)
	if err != nil {
		log.Error("invalid configuration", "err", err)
		return 2
	}
	g, err := gateway.New(gateway.Config{Dir: c.Dir, Redis: c.Redis, Model: c.Model, MaxConns: c.MaxConns, WorkerUID: c.WorkerUID, Allow: c.Allow,
		CredentialsFile: c.Creds, UpstreamTLS: upTLS, Log: log})
	if err != nil {
		log.Error("invalid configuration", "err", err)
		return 2
	}
	// SIGHUP reads the credentials file again.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-hup:
				_ = g.ReloadCredentials()
			case <-ctx.Done():
				return
			}
		}
	}()
	if err := g.Run(ctx); err != nil {
		log.Error("gateway", "err", err)
		return 1
	}
	return 0
}
