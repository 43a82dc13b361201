package spawner

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentvisor/agentvisor/envconf"
)

// OpsConfig is the operator-facing configuration of a worker-manager:
// its metrics and dashboard endpoint, the image GC's schedule and what
// happens to the workers when it stops. It is read from the environment
// apart from Config, by OpsConfigFromEnv; opsVars is its table.
type OpsConfig struct {
	// MetricsAddr (METRICS_ADDR) is where /metrics and the dashboard
	// listen; "off" turns them off (MetricsAddr ""). Loopback by default:
	// the dashboard shows prompts' request ids and projects.
	MetricsAddr string
	// MetricsMaxProjects (METRICS_MAX_PROJECTS) bounds the project label:
	// the first this many projects seen get a series of their own, the
	// others are counted under project="_other".
	MetricsMaxProjects int
	// GCRetention (GC_RETENTION): a worker image unused this long is
	// stale. GCInterval (GC_INTERVAL): how often the leader collects.
	// GCDryRun (GC_DRY_RUN): log what would be removed, remove nothing.
	GCRetention time.Duration
	GCInterval  time.Duration
	GCDryRun    bool
	// KeepWorkers (KEEP_WORKERS): the workers keep running when the
	// manager stops.
	KeepWorkers bool
	// RemoveVolumesAtStop (REMOVE_VOLUMES_AT_STOP): a manager that
	// removed its workers at its stop removes this host's project volumes
	// of its key prefix too (a compose project's `down` then leaves
	// nothing; the sessions they held are lost).
	RemoveVolumesAtStop bool
	// OpsToken is the operator token /metrics and the dashboard require:
	// OPS_TOKEN, else the content of OPS_TOKEN_FILE (trimmed), else ""
	// (the manager then makes one and writes it to OpsTokenOut).
	OpsToken string
	// OpsTokenOut (OPS_TOKEN_OUT) is the file a token the manager made
	// at start is written to (0600): its path is logged, never the token.
	// "": DefaultOpsTokenOut.
	OpsTokenOut string
}

// DefaultOpsTokenOut is where a manager with no OPS_TOKEN_OUT writes the
// token it made: under the user's configuration directory
// ($XDG_CONFIG_HOME, else ~/.config), named after the key prefix and the
// manager's id so that managers side by side on one host do not take
// each other's file.
func DefaultOpsTokenOut(cfg Config) (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("config: OPS_TOKEN_OUT unset and no configuration directory to default to: %w", err)
	}
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' || r == '_' {
			return r
		}
		return '_'
	}, cfg.Keys.Prefix+"-"+cfg.ManagerID)
	return filepath.Join(dir, "agentvisor", "ops-token-"+name), nil
}

// OpsConfigFromEnv reads OpsConfig; an error names the variable.
func OpsConfigFromEnv(getenv func(string) string) (OpsConfig, error) {
	var c OpsConfig
	if err := envconf.Load(getenv, opsVars(&c)); err != nil {
		return OpsConfig{}, err
	}
	return c, nil
}

// opsVars is OpsConfig's table of variables (configVars has Config's).
func opsVars(c *OpsConfig) []envconf.Var {
	return []envconf.Var{
		{Name: "METRICS_ADDR", Default: "127.0.0.1:9464", Value: envconf.Func(c.setMetricsAddr), Doc: "where `/metrics` (and the dashboard) listen; `off`: nowhere; an address in use (a second manager on the host) is logged as an error and the manager runs without them"},
		{Name: "METRICS_MAX_PROJECTS", Default: "50", Value: envconf.Int(&c.MetricsMaxProjects, 0), Doc: "projects with series of their own in the token and cost metrics; the others count as `_other`"},
		{Name: "GC_RETENTION", Default: "168h", Value: envconf.Duration(&c.GCRetention), Doc: "a worker image unused this long is removed by the leader's image GC (unless a container uses it)"},
		{Name: "GC_INTERVAL", Default: "24h", Value: envconf.Duration(&c.GCInterval), Doc: "how often the leader collects images"},
		{Name: "GC_DRY_RUN", Default: "false", Value: envconf.Bool(&c.GCDryRun), Doc: "`true`: the GC logs what it would remove, and removes nothing (`workerctl gc --dry-run` shows it on demand)"},
		{Name: "KEEP_WORKERS", Default: "false", Value: envconf.Bool(&c.KeepWorkers), Doc: "`true`: leave the workers running when the manager stops (else they are hibernated or removed)"},
		{Name: "REMOVE_VOLUMES_AT_STOP", Default: "false", Value: envconf.Bool(&c.RemoveVolumesAtStop), Doc: "`true`: a manager that removed its workers at its stop removes its key prefix's project volumes on this host too (their sessions and workspaces are lost): a compose project's `down` then leaves nothing ([examples/compose](../examples/compose/))"},
		{Name: "OPS_TOKEN", Default: "", Value: envconf.Func(c.setOpsToken), Doc: "the operator token `/metrics` and the dashboard require (at least 16 characters); unset: `OPS_TOKEN_FILE`, else one is made at start and written to `OPS_TOKEN_OUT` (never to the log); the key of the dashboard's sessions (a new token ends them)"},
		{Name: "OPS_TOKEN_FILE", Default: "", Value: envconf.Func(c.readOpsToken), Doc: "a file holding the operator token (Prometheus's `credentials_file` can read the same file)"},
		{Name: "OPS_TOKEN_OUT", DefaultDoc: "`$XDG_CONFIG_HOME/agentvisor/ops-token-<WORKER_KEY_PREFIX>-<MANAGER_ID>` (`~/.config` without `XDG_CONFIG_HOME`)", Value: envconf.String(&c.OpsTokenOut), Doc: "where a manager given neither `OPS_TOKEN` nor `OPS_TOKEN_FILE` writes the token it made at start (mode 0600, its directory 0700 and the manager's own, else the manager runs without the dashboard); the log names the file, never the token"},
	}
}

func (c *OpsConfig) setOpsToken(s string) error {
	if s != "" && len(s) < 16 {
		return fmt.Errorf("is %d characters: an operator token has at least 16", len(s))
	}
	c.OpsToken = s
	return nil
}

// readOpsToken reads OPS_TOKEN_FILE when OPS_TOKEN gave no token (the
// table is read in order).
func (c *OpsConfig) readOpsToken(path string) error {
	if path == "" || c.OpsToken != "" {
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return c.setOpsToken(strings.TrimSpace(string(b)))
}

func (c *OpsConfig) setMetricsAddr(s string) error {
	if s == "off" {
		c.MetricsAddr = ""
		return nil
	}
	if _, _, err := net.SplitHostPort(s); err != nil {
		return fmt.Errorf("want host:port such as 127.0.0.1:9464, or off, got %q", s)
	}
	c.MetricsAddr = s
	return nil
}
