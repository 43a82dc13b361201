package ops

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strings"
)

// DefaultOperator is who acts when nobody gave a name: a login without
// operator=, a bearer token without OperatorHeader.
const DefaultOperator = "ops"

// OperatorHeader names, with a bearer token, the operator a script acts
// as (its actions are recorded under that name).
const OperatorHeader = "X-Agentvisor-Operator"

var operatorName = regexp.MustCompile(`^[A-Za-z0-9_.@-]{1,64}$`)

// Operator is who makes a request of the operator endpoint, as
// RequireToken found it. Anyone with the token may give any name: the
// name records who acted, it does not grant anything.
type Operator struct {
	Name string
	// CSRF is the token a browser's state-changing request must carry
	// (X-CSRF-Token): tied to its session cookie, so that a page of
	// another site, which cannot read it, cannot forge one. Empty for a
	// bearer token, which no browser sends on its own.
	CSRF string
}

type operatorKey struct{}

// OperatorFrom returns the operator RequireToken let through.
func OperatorFrom(ctx context.Context) (Operator, bool) {
	op, ok := ctx.Value(operatorKey{}).(Operator)
	return op, ok
}

// sessionKeys signs sessions with a key derived from the operator token:
// a session is valid on every manager with the same token, survives a
// restart, and a new token ends every session.
type sessionKeys struct{ key []byte }

func newSessionKeys(token string) sessionKeys {
	k := sha256.Sum256([]byte("agentvisor ops session\x00" + token))
	return sessionKeys{key: k[:]}
}

func (k sessionKeys) mac(parts ...string) string {
	m := hmac.New(sha256.New, k.key)
	m.Write([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(m.Sum(nil))
}

// newSession returns a cookie value: <name>.<nonce>.<mac>.
func (k sessionKeys) newSession(name string) string {
	nonce := NewToken()
	return name + "." + nonce + "." + k.mac("session", name, nonce)
}

// check returns the session's operator when its signature holds.
func (k sessionKeys) check(v string) (string, bool) {
	i := strings.LastIndexByte(v, '.')
	if i < 0 {
		return "", false
	}
	rest, sig := v[:i], v[i+1:]
	j := strings.LastIndexByte(rest, '.')
	if j < 0 {
		return "", false
	}
	name, nonce := rest[:j], rest[j+1:]
	if !operatorName.MatchString(name) || !hmac.Equal([]byte(sig), []byte(k.mac("session", name, nonce))) {
		return "", false
	}
	return name, true
}

// csrf is the CSRF token of a session.
func (k sessionKeys) csrf(session string) string { return k.mac("csrf", session) }
