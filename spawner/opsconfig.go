package spawner

import (
	"fmt"
	"net"
	"time"
)

// OpsConfig is the operator-facing configuration of a worker-manager:
// its metrics and dashboard endpoint and the image GC's schedule. It is
// read from the environment apart from Config, by OpsConfigFromEnv.
type OpsConfig struct {
	// MetricsAddr (METRICS_ADDR, 127.0.0.1:9464) is where /metrics and the
	// dashboard listen; "off" turns them off. Loopback by default: the
	// dashboard shows prompts' request ids and projects.
	MetricsAddr string
	// MetricsMaxProjects (METRICS_MAX_PROJECTS, 50) bounds the project
	// label: the first this many projects seen get a series of their own,
	// the others are counted under project="_other".
	MetricsMaxProjects int
	// GCRetention (GC_RETENTION, 168h): a worker image unused this long
	// is stale. GCInterval (GC_INTERVAL, 24h): how often the leader
	// collects. GCDryRun (GC_DRY_RUN, false): log what would be removed,
	// remove nothing.
	GCRetention time.Duration
	GCInterval  time.Duration
	GCDryRun    bool
}

// OpsConfigFromEnv reads OpsConfig; an error names the variable.
func OpsConfigFromEnv(getenv func(string) string) (OpsConfig, error) {
	c := OpsConfig{MetricsAddr: getenv("METRICS_ADDR")}
	fail := func(name string, err error) (OpsConfig, error) {
		return OpsConfig{}, fmt.Errorf("config: %s: %w", name, err)
	}
	switch c.MetricsAddr {
	case "":
		c.MetricsAddr = "127.0.0.1:9464"
	case "off":
		c.MetricsAddr = ""
	default:
		if _, _, err := net.SplitHostPort(c.MetricsAddr); err != nil {
			return fail("METRICS_ADDR", fmt.Errorf("want host:port such as 127.0.0.1:9464, or off, got %q", c.MetricsAddr))
		}
	}
	var err error
	if c.MetricsMaxProjects, err = intVar(getenv("METRICS_MAX_PROJECTS"), 50); err != nil || c.MetricsMaxProjects < 0 {
		return fail("METRICS_MAX_PROJECTS", fmt.Errorf("want a whole number of at least 0"))
	}
	if c.GCRetention, err = durVar(getenv("GC_RETENTION"), 7*24*time.Hour); err != nil {
		return fail("GC_RETENTION", err)
	}
	if c.GCInterval, err = durVar(getenv("GC_INTERVAL"), 24*time.Hour); err != nil {
		return fail("GC_INTERVAL", err)
	}
	switch v := getenv("GC_DRY_RUN"); v {
	case "", "false", "0":
	case "true", "1":
		c.GCDryRun = true
	default:
		return fail("GC_DRY_RUN", fmt.Errorf("want true or false, got %q", v))
	}
	return c, nil
}
