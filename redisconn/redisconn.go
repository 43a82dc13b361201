// Package redisconn turns a Redis URL into go-redis clients for every Go
// component of the runtime (the wrapper, the worker-manager, workerctl,
// the examples, the fault suite), and makes the writes that matter wait
// for a replica. The URL is parsed by protocol.ParseRedisURL (redis://,
// rediss://, redis+sentinel://, rediss+sentinel://): a sentinel URL gives
// go-redis's failover client, which asks the sentinels for the primary and
// follows it when they fail it over.
//
// It is a module of its own so that the wrapper and the spawner share it
// without either importing the other, and so that the protocol module
// stays standard library only.
package redisconn

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
)

// Options parses raw and returns go-redis options for it; callers set
// their timeouts and pool sizes on them before NewClient. The error wraps
// protocol.ErrBadRedisURL and never quotes the URL.
func Options(raw string) (*redis.UniversalOptions, error) {
	u, err := protocol.ParseRedisURL(raw)
	if err != nil {
		return nil, err
	}
	return FromURL(u), nil
}

// FromURL returns go-redis options for a parsed URL.
func FromURL(u protocol.RedisURL) *redis.UniversalOptions {
	o := &redis.UniversalOptions{
		Addrs:    append([]string(nil), u.Addrs...),
		DB:       u.DB,
		Username: u.Username,
		Password: u.Password,
	}
	if u.Sentinel {
		o.MasterName = u.Master
		o.SentinelUsername, o.SentinelPassword = u.SentinelUsername, u.SentinelPassword
	}
	if u.TLS {
		// No ServerName: the TLS dial takes it from the address dialled,
		// which for a sentinel URL is whichever server is the primary.
		o.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	return o
}

// ThroughSocket makes every connection of o go through the unix socket at
// path, which relays it to the server (a sealed worker's gateway): the
// URL still names the server, for TLS (its host is the server name) and
// for the credentials. A sentinel URL is refused: its clients dial the
// sentinels and then whichever server is the primary, which one socket
// cannot stand for. With Sentinel, a sealed worker is given a plain URL
// naming the master and its gateway follows the primary behind the socket.
func ThroughSocket(o *redis.UniversalOptions, path string) error {
	if o.MasterName != "" {
		return errors.New("redisconn: a sentinel URL cannot go through a socket")
	}
	tlsConfig := o.TLSConfig
	o.Dialer = func(ctx context.Context, _, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, "unix", path)
		if err != nil || tlsConfig == nil {
			return c, err
		}
		cfg := tlsConfig.Clone()
		if cfg.ServerName == "" {
			cfg.ServerName, _, _ = net.SplitHostPort(addr)
		}
		tc := tls.Client(c, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, err
		}
		return tc, nil
	}
	return nil
}

// NewClient returns a client for o: a failover client when o names a
// master (a sentinel URL), a plain one otherwise. Both are *redis.Client,
// so the rest of a program does not care which.
func NewClient(o *redis.UniversalOptions) *redis.Client {
	if o.MasterName != "" {
		c := redis.NewFailoverClient(o.Failover())
		rememberSentinels(c, o)
		return c
	}
	return redis.NewClient(o.Simple())
}

// Open is Options then NewClient, with go-redis's default settings.
func Open(raw string) (*redis.Client, error) {
	o, err := Options(raw)
	if err != nil {
		return nil, err
	}
	return NewClient(o), nil
}

// Policy returns the WAIT policy of a component whose Redis URL is raw,
// from REDIS_WAIT_REPLICAS and REDIS_WAIT_TIMEOUT: one replica for a
// sentinel URL, none otherwise, unless they say.
func Policy(raw string) (protocol.WaitPolicy, error) {
	u, err := protocol.ParseRedisURL(raw)
	if err != nil {
		return protocol.WaitPolicy{}, err
	}
	return protocol.ParseWaitPolicy(os.Getenv(protocol.EnvRedisWaitReplicas), os.Getenv(protocol.EnvRedisWaitTimeout), u)
}

// NotReplicatedError says that the primary took a write but fewer
// replicas than the policy asks acknowledged it within its timeout: the
// write stands on the primary alone (no replica in sync, or one slow).
type NotReplicatedError struct {
	Want, Got int64
}

func (e *NotReplicatedError) Error() string {
	return fmt.Sprintf("redisconn: write acknowledged by %d of the %d replicas WAIT asked for", e.Got, e.Want)
}

// IsNotReplicated reports whether err is a *NotReplicatedError.
func IsNotReplicated(err error) bool {
	var e *NotReplicatedError
	return errors.As(err, &e)
}

// PipelineWait runs the commands queue adds to a pipeline and then, when
// p is on, WAIT p.Replicas p.Timeout, on one connection: WAIT counts the
// writes of its own connection, so it must follow them there. It returns
// the first error of the queued commands; when they all succeeded, WAIT's
// error, or a *NotReplicatedError when too few replicas acknowledged.
// The caller reads its commands' results from the commands it queued.
func PipelineWait(ctx context.Context, c redis.Cmdable, p protocol.WaitPolicy, queue func(redis.Pipeliner)) error {
	var wait *redis.IntCmd
	_, err := c.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		queue(pipe)
		if p.On() {
			wait = pipeWait(ctx, pipe, p)
		}
		return nil
	})
	if wait == nil || err != nil {
		return err
	}
	if n := wait.Val(); n < int64(p.Replicas) {
		return &NotReplicatedError{Want: int64(p.Replicas), Got: n}
	}
	return nil
}

// pipeWait queues WAIT. go-redis's Pipeliner interface lacks Wait, which
// its pipelines have (it stretches the read timeout to WAIT's own).
func pipeWait(ctx context.Context, pipe redis.Pipeliner, p protocol.WaitPolicy) *redis.IntCmd {
	if w, ok := pipe.(interface {
		Wait(context.Context, int, time.Duration) *redis.IntCmd
	}); ok {
		return w.Wait(ctx, p.Replicas, p.Timeout)
	}
	cmd := redis.NewIntCmd(ctx, "wait", p.Replicas, p.Timeout.Milliseconds())
	_ = pipe.Process(ctx, cmd)
	return cmd
}

// XAdd adds an entry that must not be lost (a task, a command) and, when
// p is on, waits until p.Replicas replicas have it. When the WAIT fails
// (the primary died: a failover under way) or comes back short, it looks
// for the entry on whatever primary the client reaches now, with backoff
// until ctx ends, and adds it again only when it is not there: a failover
// costs no entry, and adds none twice as far as that look can tell. An
// entry found there stands as it is (it is on the new primary; only a
// second failover before that one has a replica could lose it). A short
// answer of a primary that still has the entry is a *NotReplicatedError,
// with the entry's id: the caller may go on (the write is on the primary).
func XAdd(ctx context.Context, c redis.Cmdable, p protocol.WaitPolicy, args *redis.XAddArgs) (string, error) {
	if !p.On() {
		return c.XAdd(ctx, args).Result() // exactly the XADD of a client that knows no WAIT
	}
	var add *redis.StringCmd
	err := PipelineWait(ctx, c, p, func(pipe redis.Pipeliner) { add = pipe.XAdd(ctx, args) })
	id := add.Val()
	if err == nil || id == "" {
		// Done, or the add itself failed (no id came back): the caller's
		// to retry. (go-redis gives a pipeline's error to every command of
		// it, so an add whose id came back counts as made.)
		return id, err
	}
	short := IsNotReplicated(err)
	back := 100 * time.Millisecond
	for {
		// Before a look: a backoff while the primary is unreachable; after
		// a short answer, one WAIT timeout more. A primary that answered
		// short may be the old one in the moment between a replica's
		// promotion and the client's switch (+switch-master), which then
		// drops what it took: the look must reach the new one.
		wait := back
		if short {
			wait = p.Timeout
		}
		select {
		case <-ctx.Done():
			return id, fmt.Errorf("redisconn: confirm entry %s of %s: %w (last: %v)", id, args.Stream, ctx.Err(), err)
		case <-time.After(wait):
		}
		if !short {
			back = min(2*back, 2*time.Second)
		}
		var done bool
		id, err, done = confirm(ctx, c, p, args, id, short, err)
		if done {
			return id, err
		}
		short = false
	}
}

// confirm looks for entry id of args.Stream on the primary and, when it is
// not there, adds it again (under a new id). For a client of a sentinel
// URL the primary is the one the sentinels name now, reached directly: the
// client itself may still be connected to a demoted primary that has the
// entry until its resync drops it. done is false while no primary could
// be asked or the add again was not made. prev is the short answer that
// led here, returned when the primary has the entry.
func confirm(ctx context.Context, c redis.Cmdable, p protocol.WaitPolicy, args *redis.XAddArgs, id string, short bool, prev error) (string, error, bool) {
	on, release, err := primaryOf(ctx, c)
	if err != nil {
		return id, err, false
	}
	defer release()
	found, err := on.XRange(ctx, args.Stream, id, id).Result()
	if err != nil {
		return id, err, false // the primary still unreachable
	}
	if len(found) > 0 {
		if short {
			return id, prev, true // a live primary that has it, without enough replicas
		}
		return id, nil, true // on the primary reached after the failover
	}
	a := *args
	a.ID = ""
	var add *redis.StringCmd
	err = PipelineWait(ctx, on, p, func(pipe redis.Pipeliner) { add = pipe.XAdd(ctx, &a) })
	if add.Val() != "" && (err == nil || IsNotReplicated(err)) {
		return add.Val(), err, true
	}
	return id, err, false
}

// sentinelClients holds the options of every failover client NewClient
// made, so that confirm can ask their sentinels for the primary. A client
// that is no longer referenced leaves the map.
var sentinelClients sync.Map // weak.Pointer[redis.Client] -> *redis.UniversalOptions

func rememberSentinels(c *redis.Client, o *redis.UniversalOptions) {
	key := weak.Make(c)
	sentinelClients.Store(key, o)
	runtime.AddCleanup(c, func(k weak.Pointer[redis.Client]) { sentinelClients.Delete(k) }, key)
}

// primaryOf returns what to read the primary through: c itself, or for a
// failover client a direct client of the primary its sentinels name (most
// of those that answer), which release closes.
func primaryOf(ctx context.Context, c redis.Cmdable) (redis.Cmdable, func(), error) {
	rc, ok := c.(*redis.Client)
	if !ok {
		return c, func() {}, nil
	}
	v, ok := sentinelClients.Load(weak.Make(rc))
	if !ok {
		return c, func() {}, nil
	}
	o := v.(*redis.UniversalOptions)
	addr, err := NamedPrimary(ctx, o)
	if err != nil {
		return nil, nil, err
	}
	direct := redis.NewClient(&redis.Options{
		Addr: addr, Username: o.Username, Password: o.Password, DB: o.DB,
		TLSConfig: o.TLSConfig, MaxRetries: -1, PoolSize: 1,
	})
	return direct, func() { direct.Close() }, nil
}

// NamedPrimary asks every sentinel of o for the primary and returns the
// one protocol.NewestPrimary chooses from their answers (none while a
// sentinel is failing the master over). A sentinel user not allowed
// SENTINEL MASTER is asked for the address alone. It is what XAdd reads
// after a WAIT answered short, exported for the tests of that choice
// against real sentinels (redisconn/integration).
func NamedPrimary(ctx context.Context, o *redis.UniversalOptions) (string, error) {
	var answers []protocol.SentinelAnswer
	var lastErr error
	for _, a := range o.Addrs {
		sc := redis.NewSentinelClient(&redis.Options{
			Addr: a, Username: o.SentinelUsername, Password: o.SentinelPassword,
			TLSConfig: o.TLSConfig, MaxRetries: -1, DialTimeout: time.Second,
		})
		n, err := askSentinel(ctx, sc, o.MasterName)
		sc.Close()
		if err != nil {
			lastErr = err
			continue
		}
		answers = append(answers, n)
	}
	addr, err := protocol.NewestPrimary(answers)
	if err != nil {
		return "", fmt.Errorf("redisconn: the primary of %q: %w (last error: %v)", o.MasterName, err, lastErr)
	}
	return addr, nil
}

// askSentinel asks one sentinel for master's primary.
func askSentinel(ctx context.Context, sc *redis.SentinelClient, master string) (n protocol.SentinelAnswer, err error) {
	m, err := sc.Master(ctx, master).Result()
	if err == nil && m["ip"] != "" && m["port"] != "" {
		n.Addr = net.JoinHostPort(m["ip"], m["port"])
		n.Epoch, _ = strconv.ParseInt(m["config-epoch"], 10, 64)
		n.Failing = strings.Contains(m["flags"], "failover_in_progress")
		return n, nil
	}
	var reply redis.Error
	if err != nil && !errors.As(err, &reply) {
		return n, err // unreachable, or slow: asking again would only wait twice
	}
	hp, err := sc.GetMasterAddrByName(ctx, master).Result()
	if err != nil || len(hp) != 2 {
		if err == nil {
			err = fmt.Errorf("the sentinel knows no master %q", master)
		}
		return n, err
	}
	n.Addr = net.JoinHostPort(hp[0], hp[1])
	return n, nil
}

// SetLogger sends go-redis's own messages to log instead of its default
// plain-text logger on stderr, as JSON like every other line of a
// component: what the sentinels say (a new primary) at info level, the
// rest (a failed dial while Redis is down, say) at debug level. Nil
// silences them (a command-line tool).
func SetLogger(log *slog.Logger) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	redis.SetLogger(slogAdapter{log})
}

type slogAdapter struct{ log *slog.Logger }

func (a slogAdapter) Printf(ctx context.Context, format string, v ...any) {
	msg := "redis client: " + fmt.Sprintf(format, v...)
	if strings.HasPrefix(format, "sentinel:") {
		a.log.InfoContext(ctx, msg)
		return
	}
	a.log.DebugContext(ctx, msg)
}
