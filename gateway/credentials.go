package gateway

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

// Credentials the agent never holds. The operator gives the gateway a
// header (such as Authorization: Basic ...) for a host, scoped to
// projects or workers; a worker it applies to reaches that host as
// http://host/... through egress.sock, and the gateway forwards the
// request as HTTPS to host:port with the header added. The container
// holds no secret: the gateway can add a header only to a request it can
// read, so the container speaks plain HTTP to the gateway (over its unix
// socket, on the host) and TLS starts at the gateway. A CONNECT to the
// same host is TLS end to end and gets no credential.

// Credential is one credential of Config.Credentials or of the
// credentials file (GATEWAY_CREDENTIALS_FILE). Either Header and Value,
// or Username and Password (a Basic Authorization header).
type Credential struct {
	Host     string   `json:"host"`               // a host name or IP literal, as the allowlist names it
	Port     int      `json:"port,omitempty"`     // the upstream's HTTPS port; 0: 443
	Header   string   `json:"header,omitempty"`   // "": Authorization
	Value    string   `json:"value,omitempty"`    // the header's value: the secret
	Username string   `json:"username,omitempty"` // with Password: Value is "Basic base64(username:password)"
	Password string   `json:"password,omitempty"`
	Projects []string `json:"projects,omitempty"` // the projects (WorkerSpec.ProjectID) it applies to; empty: all
	Workers  []string `json:"workers,omitempty"`  // the workers it applies to; empty: all
}

// String never shows the secret: a Credential printed by mistake leaks
// nothing.
func (c Credential) String() string {
	return fmt.Sprintf("credential for %s (header %s)", c.Host, c.Header)
}

// GoString is String, for %#v.
func (c Credential) GoString() string { return c.String() }

// credential is a checked Credential.
type credential struct {
	host     target // name or IP literal; port is the upstream's
	header   string // canonical
	value    string
	projects []string
	workers  []string
}

// appliesTo reports whether the credential is for a worker of that id
// and project: every scope it names must hold.
func (c *credential) appliesTo(id, project string) bool {
	if len(c.workers) > 0 && !slices.Contains(c.workers, id) {
		return false
	}
	if len(c.projects) > 0 && (project == "" || !slices.Contains(c.projects, project)) {
		return false
	}
	return true
}

// credentials are the checked credentials in force, in order: the first
// that applies to a worker for a host is the one used.
type credentials []*credential

// lookup returns the credential for host (a target's host()) of worker
// id in project, or nil.
func (cs credentials) lookup(host, id, project string) *credential {
	for _, c := range cs {
		if c.host.host() == host && c.appliesTo(id, project) {
			return c
		}
	}
	return nil
}

// hosts returns the hosts with a credential for worker id in project,
// sorted, without repeats.
func (cs credentials) hosts(id, project string) []string {
	out := []string{}
	for _, c := range cs {
		if c.appliesTo(id, project) && !slices.Contains(out, c.host.host()) {
			out = append(out, c.host.host())
		}
	}
	slices.Sort(out)
	return out
}

// refusedHeaders are headers a credential cannot be: they frame the
// request or are for the proxy.
var refusedHeaders = []string{"Host", "Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive",
	"Te", "Trailer", "Upgrade", "Expect"}

// parseCredentials checks cs; an error names the entry (what, and its
// index and host) and never shows a secret.
func parseCredentials(what string, cs []Credential) (credentials, error) {
	out := make(credentials, 0, len(cs))
	for i, c := range cs {
		pc, err := parseCredential(c)
		if err != nil {
			return nil, fmt.Errorf("gateway: %s: entry %d (host %q): %w", what, i, printable(c.Host), err)
		}
		out = append(out, pc)
	}
	return out, nil
}

func parseCredential(c Credential) (*credential, error) {
	if c.Host == "" {
		return nil, errors.New("no host")
	}
	port := c.Port
	if port == 0 {
		port = 443
	}
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("port %d: want 1 to 65535", c.Port)
	}
	host := strings.TrimSuffix(strings.TrimPrefix(c.Host, "["), "]")
	t := target{port: uint16(port), raw: c.Host}
	if a, err := netip.ParseAddr(host); err == nil && a.Zone() == "" {
		t.addr = a.Unmap()
	} else if n, ok := protocol.NormalizeHostName(c.Host); ok && !strings.HasPrefix(n, "*") {
		t.name = n
	} else {
		return nil, errors.New("host: want a host name or an IP literal (no port, no wildcard)")
	}
	cr := &credential{host: t, header: http.CanonicalHeaderKey(c.Header)}
	if cr.header == "" {
		cr.header = "Authorization"
	}
	if !token(cr.header) {
		return nil, errors.New("header: want a header name (letters, digits and !#$%&'*+-.^_`|~)")
	}
	if slices.Contains(refusedHeaders, cr.header) || strings.HasPrefix(cr.header, "Proxy-") {
		return nil, fmt.Errorf("header %s: not a header a credential may set", cr.header)
	}
	switch {
	case c.Value != "" && (c.Username != "" || c.Password != ""):
		return nil, errors.New("both value and username/password: give one")
	case c.Value != "":
		cr.value = c.Value
	case c.Username != "" || c.Password != "":
		if c.Username == "" || c.Password == "" {
			return nil, errors.New("username without password, or password without username")
		}
		if strings.Contains(c.Username, ":") {
			return nil, errors.New("username: no ':' in a Basic username")
		}
		if cr.header != "Authorization" {
			return nil, errors.New("username/password make an Authorization header: header must be Authorization or unset")
		}
		cr.value = "Basic " + base64.StdEncoding.EncodeToString([]byte(c.Username+":"+c.Password))
	default:
		return nil, errors.New("no value, and no username/password")
	}
	for _, r := range cr.value {
		if r < 0x20 && r != '\t' || r == 0x7f {
			return nil, errors.New("value (or username/password): control characters are not allowed in a header")
		}
	}
	for _, p := range c.Projects {
		if p == "" {
			return nil, errors.New("projects: an empty project id")
		}
	}
	for _, w := range c.Workers {
		if err := ValidID(w); err != nil {
			return nil, fmt.Errorf("workers: %w", err)
		}
	}
	cr.projects = slices.Clone(c.Projects)
	cr.workers = slices.Clone(c.Workers)
	return cr, nil
}

// token reports whether s is an HTTP token (RFC 9110 5.6.2).
func token(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r > 0x7e || r <= 0x20 || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, r) {
			return false
		}
	}
	return true
}

// credentialsFile is the credentials file as read: its credentials, and
// what identifies the version read (to read it again when it changes).
type credentialsFile struct {
	creds []Credential
	mtime time.Time
	size  int64
}

// readCredentialsFile reads and checks path: a JSON array of
// Credential, or {"credentials": [...]}. The file must be the gateway's
// user's and readable by it alone (mode 0600 or 0400): a secret others
// could read is refused.
func readCredentialsFile(path string) (credentialsFile, error) {
	var cf credentialsFile
	fi, err := os.Stat(path)
	if err != nil {
		return cf, fmt.Errorf("gateway: credentials file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return cf, fmt.Errorf("gateway: credentials file %s: not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return cf, fmt.Errorf("gateway: credentials file %s: mode %04o: want 0600 (readable by its owner only)", path, perm)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return cf, fmt.Errorf("gateway: credentials file %s: owned by uid %d, not the gateway's (%d)", path, st.Uid, os.Geteuid())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return cf, fmt.Errorf("gateway: credentials file: %w", err)
	}
	cf.mtime, cf.size = fi.ModTime(), fi.Size()
	b = bytes.TrimSpace(b)
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if len(b) > 0 && b[0] == '[' {
		err = dec.Decode(&cf.creds)
	} else {
		var obj struct {
			Credentials []Credential `json:"credentials"`
		}
		err = dec.Decode(&obj)
		cf.creds = obj.Credentials
	}
	if err != nil {
		// json's errors name fields and offsets, never the values.
		return cf, fmt.Errorf("gateway: credentials file %s: want a JSON array of {\"host\", \"header\", \"value\", ...}: %w", path, err)
	}
	if _, err := parseCredentials("credentials file "+path, cf.creds); err != nil {
		return cf, err
	}
	return cf, nil
}
