package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"time"
)

// DefaultMaxConns is Config.MaxConns when it is 0.
const DefaultMaxConns = 256

// maxSocketPath is the longest path a unix socket may have on Linux.
const maxSocketPath = 107

// Config configures a Gateway.
type Config struct {
	Dir string // where control.sock and the workers' directories are
	// Redis is the upstream Redis: host:port (TCP), or a sentinel URL
	// (redis+sentinel://host1:port1,host2:port2/master, without the data
	// user's credentials; ParseRedis), whose primary each connection is
	// relayed to and followed across failovers (sentinel.go).
	Redis string
	// Model is the upstream model API: host:port (spoken to over HTTPS),
	// or a URL https://host[:port], or http://host[:port] for a plain
	// HTTP model server on the host (a test's stub); "": no model.sock.
	Model string
	Log   *slog.Logger // nil: discard
	// MaxConns bounds the connections one worker holds open at once (0:
	// DefaultMaxConns): a container that opens connections without end
	// runs out of its own share, not of the gateway's descriptors.
	MaxConns int
	// WorkerUID owns every worker socket (mode 0600): the uid the
	// containers run as (0: DefaultWorkerUID). Only it and root can
	// connect. The gateway must be root, or that uid itself.
	WorkerUID int
	// DialTimeout bounds a dial of an upstream, and a name's resolution
	// for egress (0: 5 s).
	DialTimeout time.Duration
	// Allow is the operator's egress allowlist, in force for every
	// worker besides its own (allow.go has the syntax). Empty: each
	// worker reaches what its own list names, no more.
	Allow []string
	// Resolver resolves an allowed name of an egress request to IP
	// addresses (nil: net.DefaultResolver.LookupHost). DialEgress dials
	// one of them, "ip:port" over "tcp" (nil: a net.Dialer). Both are for
	// tests, which map names to loopback test servers, and for embedding.
	Resolver   func(ctx context.Context, host string) ([]string, error)
	DialEgress func(ctx context.Context, network, addr string) (net.Conn, error)
	// Credentials are headers the gateway adds to a worker's requests to
	// a host, which the container never holds (credentials.go). The
	// credentials of CredentialsFile (a JSON file of mode 0600; ""
	// none) come after them; the file is read at New, again by
	// ReloadCredentials, and every CredentialsPoll when it changed.
	Credentials     []Credential
	CredentialsFile string
	// CredentialsPoll is how often the credentials file is checked for a
	// change (0: 10 s).
	CredentialsPoll time.Duration
	// UpstreamTLS configures the TLS the gateway speaks to a credentialed
	// host and to the model API (nil: the system's roots); an empty
	// ServerName is the request's host. For tests (a loopback TLS server)
	// and embedding.
	UpstreamTLS *tls.Config
	// SentinelTLS configures the TLS the gateway speaks to the sentinels
	// of a rediss+sentinel:// Redis (nil: the system's roots, ServerName
	// the sentinel's host). For tests and embedding.
	SentinelTLS *tls.Config
}

// withDefaults checks what of c no component checks itself (Dir), and
// fills in the defaults of what is unset.
func (c Config) withDefaults() (Config, error) {
	if c.Dir == "" {
		return c, errors.New("gateway: no Dir")
	}
	abs, err := filepath.Abs(c.Dir)
	if err != nil {
		return c, fmt.Errorf("gateway: Dir: %w", err)
	}
	c.Dir = abs
	// A unix socket's path is at most 107 bytes: the longest id's sockets
	// must fit.
	if n := len(filepath.Join(abs, strings.Repeat("x", 64), ModelSocket)); n > maxSocketPath {
		return c, fmt.Errorf("gateway: Dir %s is too long: a worker's socket path would be %d bytes, at most %d", abs, n, maxSocketPath)
	}
	if c.WorkerUID <= 0 {
		c.WorkerUID = DefaultWorkerUID
	}
	if c.MaxConns <= 0 {
		c.MaxConns = DefaultMaxConns
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = 5 * time.Second
	}
	if c.CredentialsPoll <= 0 {
		c.CredentialsPoll = 10 * time.Second
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	return c, nil
}
