package protocol

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Redis URLs. Every component takes its Redis as one URL (REDIS_URL,
// WORKER_REDIS_URL, workerctl's --redis): a single server, or a primary
// found through Redis Sentinel. PROTOCOL.md, "Redis URL", gives the form
// for consumers in any language; ParseRedisURL is the one parser of the Go
// components, and the Go module redisconn turns its result into a go-redis
// client.
//
//	redis://[[user]:password@]host[:port][/db]
//	rediss://...                                    (TLS)
//	redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/master[/db][?sentinel_username=u&sentinel_password=p]
//	rediss+sentinel://...                           (TLS to the sentinels and the servers)

// URL schemes.
const (
	SchemeRedis         = "redis"
	SchemeRedisTLS      = "rediss"
	SchemeSentinel      = "redis+sentinel"
	SchemeSentinelTLS   = "rediss+sentinel"
	DefaultRedisPort    = "6379"
	DefaultSentinelPort = "26379"
)

// Query parameters of a sentinel URL: the sentinels' own credentials,
// when they require them (the user and password before the @ are the
// primary's).
const (
	RedisURLSentinelUsername = "sentinel_username"
	RedisURLSentinelPassword = "sentinel_password"
)

// ErrBadRedisURL is the error of every URL ParseRedisURL refuses; the
// message after it says what is wrong, and never quotes the URL (it may
// hold a password).
var ErrBadRedisURL = errors.New("protocol: bad redis URL")

var schemeRe = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]{0,19}$`)

// RedisURL is a parsed Redis URL.
type RedisURL struct {
	// Sentinel: Addrs are sentinels, which name the current primary of
	// Master; otherwise Addrs holds the one server.
	Sentinel bool
	TLS      bool
	Addrs    []string // host:port
	Master   string   // the name the sentinels monitor (sentinel URLs only)
	DB       int
	// Username and Password authenticate to the data server (the primary).
	// An empty Username with a Password is the default user (AUTH
	// password).
	Username, Password string
	// SentinelUsername and SentinelPassword authenticate to the sentinels.
	SentinelUsername, SentinelPassword string
}

func badURL(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadRedisURL, fmt.Sprintf(format, args...))
}

// ParseRedisURL parses a Redis URL of one of the four schemes. Its errors
// wrap ErrBadRedisURL and never contain the URL's text.
func ParseRedisURL(raw string) (RedisURL, error) {
	var u RedisURL
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return u, badURL("want redis://, rediss://, redis+sentinel:// or rediss+sentinel://")
	}
	switch strings.ToLower(scheme) {
	case SchemeRedis:
	case SchemeRedisTLS:
		u.TLS = true
	case SchemeSentinel:
		u.Sentinel = true
	case SchemeSentinelTLS:
		u.Sentinel, u.TLS = true, true
	default:
		what := "an unknown scheme"
		if schemeRe.MatchString(scheme) {
			what = fmt.Sprintf("unknown scheme %q", scheme) // quoted only when it cannot be a mistyped userinfo
		}
		return u, badURL("%s (want redis, rediss, redis+sentinel or rediss+sentinel)", what)
	}
	rest, rawQuery, _ := strings.Cut(rest, "?")
	if i := strings.Index(rest, "#"); i >= 0 {
		return u, badURL("a fragment (#) has no meaning")
	}
	authority, path := rest, ""
	if i := strings.Index(rest, "/"); i >= 0 {
		authority, path = rest[:i], rest[i:]
	}
	if i := strings.LastIndex(authority, "@"); i >= 0 {
		var err error
		if u.Username, u.Password, err = userinfo(authority[:i]); err != nil {
			return u, err
		}
		authority = authority[i+1:]
	}
	port := DefaultRedisPort
	if u.Sentinel {
		port = DefaultSentinelPort
	}
	for _, h := range strings.Split(authority, ",") {
		addr, err := hostPort(h, port, u.Sentinel)
		if err != nil {
			return u, err
		}
		u.Addrs = append(u.Addrs, addr)
	}
	if !u.Sentinel && len(u.Addrs) > 1 {
		return u, badURL("a %s:// URL names one server; list several sentinels with redis+sentinel://", strings.ToLower(scheme))
	}
	segs := strings.Split(strings.Trim(path, "/"), "/")
	if len(segs) == 1 && segs[0] == "" {
		segs = nil
	}
	if u.Sentinel {
		if len(segs) == 0 {
			return u, badURL("a sentinel URL needs the master's name as its path (/mymaster or /mymaster/0)")
		}
		m, err := url.PathUnescape(segs[0])
		if err != nil || m == "" || strings.ContainsAny(m, " \t\r\n") {
			return u, badURL("the master's name is empty or malformed")
		}
		u.Master, segs = m, segs[1:]
	}
	switch len(segs) {
	case 0:
	case 1:
		db, err := strconv.Atoi(segs[0])
		if err != nil || db < 0 {
			return u, badURL("the database must be a number of 0 or more")
		}
		u.DB = db
	default:
		return u, badURL("too many path segments (want /db, or /master/db for a sentinel URL)")
	}
	if err := u.query(rawQuery); err != nil {
		return u, err
	}
	return u, nil
}

func userinfo(s string) (user, password string, err error) {
	user, password, _ = strings.Cut(s, ":")
	if user, err = url.PathUnescape(user); err != nil {
		return "", "", badURL("the user name is not well escaped")
	}
	if password, err = url.PathUnescape(password); err != nil {
		return "", "", badURL("the password is not well escaped")
	}
	return user, password, nil
}

func hostPort(h, port string, sentinel bool) (string, error) {
	if h == "" {
		if sentinel {
			return "", badURL("an empty sentinel address")
		}
		return "localhost:" + port, nil
	}
	host, p := h, port
	if strings.HasPrefix(h, "[") {
		end := strings.Index(h, "]")
		if end < 0 {
			return "", badURL("an IPv6 address without its closing bracket")
		}
		host = h[1:end]
		if tail := h[end+1:]; tail != "" {
			if !strings.HasPrefix(tail, ":") {
				return "", badURL("junk after an IPv6 address")
			}
			p = tail[1:]
		}
	} else if i := strings.LastIndex(h, ":"); i >= 0 {
		host, p = h[:i], h[i+1:]
	}
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 65535 {
		return "", badURL("a port must be a number from 1 to 65535")
	}
	bad := " /\\?#@[]\t\r\n"
	if !strings.HasPrefix(h, "[") {
		bad += ":" // an IPv6 address goes in brackets
	}
	if host == "" || strings.ContainsAny(host, bad) {
		return "", badURL("a host name is empty or malformed")
	}
	return net.JoinHostPort(host, strconv.Itoa(n)), nil
}

func (u *RedisURL) query(raw string) error {
	if raw == "" {
		return nil
	}
	q, err := url.ParseQuery(raw)
	if err != nil {
		return badURL("the query does not parse")
	}
	for k, vs := range q {
		if !u.Sentinel || (k != RedisURLSentinelUsername && k != RedisURLSentinelPassword) {
			return badURL("unknown query parameter %q (a sentinel URL takes %s and %s)", cutText(k, 40), RedisURLSentinelUsername, RedisURLSentinelPassword)
		}
		if len(vs) != 1 {
			return badURL("query parameter %s given %d times", k, len(vs))
		}
	}
	u.SentinelUsername, u.SentinelPassword = q.Get(RedisURLSentinelUsername), q.Get(RedisURLSentinelPassword)
	return nil
}

func cutText(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// Scheme returns the URL's scheme.
func (u RedisURL) Scheme() string {
	switch {
	case u.Sentinel && u.TLS:
		return SchemeSentinelTLS
	case u.Sentinel:
		return SchemeSentinel
	case u.TLS:
		return SchemeRedisTLS
	}
	return SchemeRedis
}

// String returns the URL in its canonical form, which ParseRedisURL reads
// back as u.
func (u RedisURL) String() string { return u.format("") }

// Redacted is String with every password replaced by "xxxxx": what logs
// and errors may show.
func (u RedisURL) Redacted() string { return u.format("xxxxx") }

func (u RedisURL) format(mask string) string {
	hide := func(p string) string {
		if mask != "" && p != "" {
			return mask
		}
		return p
	}
	var b strings.Builder
	b.WriteString(u.Scheme() + "://")
	if u.Username != "" || u.Password != "" {
		b.WriteString(escapeUserinfo(u.Username) + ":" + escapeUserinfo(hide(u.Password)) + "@")
	}
	b.WriteString(strings.Join(u.Addrs, ","))
	if u.Sentinel {
		b.WriteString("/" + url.PathEscape(u.Master))
	}
	b.WriteString("/" + strconv.Itoa(u.DB))
	q := url.Values{}
	if u.SentinelUsername != "" {
		q.Set(RedisURLSentinelUsername, u.SentinelUsername)
	}
	if u.SentinelPassword != "" {
		q.Set(RedisURLSentinelPassword, hide(u.SentinelPassword))
	}
	if len(q) > 0 {
		b.WriteString("?" + q.Encode())
	}
	return b.String()
}

// escapeUserinfo escapes a user name or password for the userinfo part:
// PathEscape leaves ':' and '@' as they are, which would end it (worker
// users are named agentvisor:<prefix>:<id>).
func escapeUserinfo(s string) string {
	return strings.NewReplacer(":", "%3A", "@", "%40").Replace(url.PathEscape(s))
}

// WithUser returns the URL with the data server's user and password
// replaced: a worker's own Redis user (ACL) in the URL its manager
// connects with. The sentinels' credentials stay.
func (u RedisURL) WithUser(user, password string) RedisURL {
	u.Username, u.Password = user, password
	u.Addrs = append([]string(nil), u.Addrs...)
	return u
}

// RedactRedisURL returns raw with its passwords replaced, or a fixed text
// when it does not parse: never the text of a URL that may hold one.
func RedactRedisURL(raw string) string {
	u, err := ParseRedisURL(raw)
	if err != nil {
		return "(a redis URL that does not parse)"
	}
	return u.Redacted()
}

// WAIT: the writes that matter (a task's output with the acknowledgement
// of its input, a task sent, a create command) are followed by WAIT
// numreplicas timeout, so that a failover does not lose them once they are
// acknowledged. PROTOCOL.md, "Delivery guarantees", says what this bounds.
const (
	// EnvRedisWaitReplicas names the variable that sets WAIT's
	// numreplicas: 0 turns WAIT off. Its default is 1 for a sentinel URL,
	// 0 otherwise.
	EnvRedisWaitReplicas = "REDIS_WAIT_REPLICAS"
	// EnvRedisWaitTimeout names the variable that sets WAIT's timeout
	// (a duration, or milliseconds).
	EnvRedisWaitTimeout = "REDIS_WAIT_TIMEOUT"
	// DefaultRedisWaitTimeout is REDIS_WAIT_TIMEOUT's default: a replica
	// in sync answers WAIT within a millisecond or two (the primary asks it
	// at once); the timeout is what a write pays while none is.
	DefaultRedisWaitTimeout = 500 * time.Millisecond
)

// WaitPolicy is how many replicas a write that matters waits for, and how
// long one WAIT may take.
type WaitPolicy struct {
	Replicas int
	Timeout  time.Duration
}

// On reports whether writes wait for replicas at all.
func (p WaitPolicy) On() bool { return p.Replicas > 0 }

// ParseWaitPolicy reads REDIS_WAIT_REPLICAS and REDIS_WAIT_TIMEOUT (their
// values, "" when unset) for a component whose Redis URL is u.
func ParseWaitPolicy(replicas, timeout string, u RedisURL) (WaitPolicy, error) {
	p := WaitPolicy{Timeout: DefaultRedisWaitTimeout}
	if u.Sentinel {
		p.Replicas = 1
	}
	if replicas != "" {
		n, err := strconv.Atoi(strings.TrimSpace(replicas))
		if err != nil || n < 0 || n > 100 {
			return p, fmt.Errorf("%s: want a number of replicas from 0 to 100", EnvRedisWaitReplicas)
		}
		p.Replicas = n
	}
	if timeout != "" {
		t := strings.TrimSpace(timeout)
		d, err := time.ParseDuration(t)
		if n, nerr := strconv.Atoi(t); nerr == nil {
			d, err = time.Duration(n)*time.Millisecond, nil
		}
		if err != nil || d <= 0 || d > time.Minute {
			return p, fmt.Errorf("%s: want a duration above 0 and at most 1m (or milliseconds)", EnvRedisWaitTimeout)
		}
		p.Timeout = d
	}
	return p, nil
}
