package protocol

import (
	"net/netip"
	"strings"
)

// TypeAdopt is the type of an Adopt document.
const TypeAdopt Type = "adopt"

// Adopt hands a warm pool worker's container to a hibernated worker: the
// worker-manager adds it to the warm worker's input as it wakes the
// hibernated one there. The wrapper, idle, checks that it may log in to
// Redis as RedisUser with its own password (the manager gave that user
// the password of the warm worker's), then re-executes itself as
// WorkerID: its heartbeat, input and output are the hibernated worker's
// from then on. No secret travels in it, and a forged one changes
// nothing: the wrapper takes it only when redis_user is the per-worker
// user of worker_id, another worker's than its own, and it can log in as
// that user with its own password; otherwise it goes on as it was.
// Consumers never send it.
type Adopt struct {
	V         int    `json:"v"`
	Type      Type   `json:"type"`
	WorkerID  string `json:"worker_id"`  // required: the hibernated worker the container becomes
	RedisUser string `json:"redis_user"` // required: the woken worker's Redis user, to log in as
	// CredentialHosts are the hosts the gateway holds a credential for,
	// for the woken worker (its CREDENTIAL_HOSTS from then on; none when
	// empty): a credential may name the workers it is for.
	CredentialHosts []string `json:"credential_hosts,omitempty"`
}

// Validate checks every field of a.
func (a Adopt) Validate() error {
	if err := checkID("worker_id", a.WorkerID, true); err != nil {
		return err
	}
	if a.RedisUser == "" {
		return fieldErr("redis_user", "required")
	}
	if !validRedisUser(a.RedisUser) {
		return fieldErr("redis_user", "is not a Redis user name (printable ASCII, no space, '@' or '/', at most 256 bytes)")
	}
	if len(a.CredentialHosts) > maxCredentialHosts {
		return fieldErr("credential_hosts", "more than %d hosts", maxCredentialHosts)
	}
	for _, h := range a.CredentialHosts {
		if !validCredentialHost(h) {
			return fieldErr("credential_hosts", "%.64q is not a host name or an IP literal", h)
		}
	}
	return nil
}

// maxCredentialHosts bounds an adopt document's credential_hosts.
const maxCredentialHosts = 256

// validCredentialHost accepts a host name or an IP literal (IPv6 with or
// without brackets, no zone), as CREDENTIAL_HOSTS takes them.
func validCredentialHost(h string) bool {
	if n, ok := NormalizeHostName(h); ok && n == h {
		return true
	}
	if inner, ok := strings.CutPrefix(h, "["); ok {
		a, err := netip.ParseAddr(strings.TrimSuffix(inner, "]"))
		return err == nil && strings.HasSuffix(h, "]") && a.Is6() && a.Zone() == ""
	}
	a, err := netip.ParseAddr(h)
	return err == nil && a.Zone() == ""
}

// validRedisUser accepts the per-worker user names of the runtime
// (agentvisor:<prefix>:<id>): printable, no space, no '@' or '/'.
func validRedisUser(u string) bool {
	for _, r := range u {
		if r <= ' ' || r == '@' || r == '/' || r > '~' {
			return false
		}
	}
	return len(u) <= 256
}

// Encode returns the JSON document of a, with v and type set.
func (a Adopt) Encode() ([]byte, error) {
	a.V, a.Type = Version, TypeAdopt
	return encode(a)
}

// DecodeAdopt parses and validates an adopt document.
func DecodeAdopt(data []byte) (Adopt, error) {
	var a Adopt
	err := decode(TypeAdopt, data, &a, func() error { return a.Validate() })
	return a, err
}
