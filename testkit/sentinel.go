package testkit

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"

	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Sentinel is a Redis Sentinel deployment a test started on loopback: a
// primary, its replicas and three sentinels (redis-server in sentinel
// mode), each on a free port of its own, all stopped when the test ends.
// Tests fail it over (Failover, or SIGKILL of the primary) and find the
// new primary through the sentinels, as clients do.
type Sentinel struct {
	Master           string   // the name the sentinels monitor
	Password         string   // the servers' requirepass (and masterauth); "" for none
	SentinelPassword string   // the sentinels' requirepass; "" for none
	Servers          []*Redis // Servers[0] is the first primary
	Sentinels        []*Redis
}

// SentinelOptions adjusts StartSentinel.
type SentinelOptions struct {
	Password         string
	SentinelPassword string
	Replicas         int           // 1 when 0
	Sentinels        int           // 3 when 0 (quorum 2)
	DownAfter        time.Duration // sentinel down-after-milliseconds; 1 s when 0
}

// StartSentinel starts a primary, its replicas and the sentinels, and
// returns once every replica is in sync and every sentinel knows them
// all. A missing redis-server fails the test.
func StartSentinel(t testing.TB, opts SentinelOptions) *Sentinel {
	t.Helper()
	if opts.Replicas == 0 {
		opts.Replicas = 1
	}
	if opts.Sentinels == 0 {
		opts.Sentinels = 3
	}
	if opts.DownAfter == 0 {
		opts.DownAfter = time.Second
	}
	s := &Sentinel{Master: "agentvisor", Password: opts.Password, SentinelPassword: opts.SentinelPassword}
	var auth []string
	if opts.Password != "" {
		auth = []string{"--masterauth", opts.Password}
	}
	primary := startServer(t, opts.Password, "", auth)
	s.Servers = append(s.Servers, primary)
	for i := 0; i < opts.Replicas; i++ {
		args := append([]string{"--replicaof", "127.0.0.1", strconv.Itoa(primary.Port)}, auth...)
		s.Servers = append(s.Servers, startServer(t, opts.Password, "", args))
	}
	if err := waitFor(10*time.Second, func() bool { return s.inSync(primary, opts.Replicas) }); err != nil {
		t.Fatalf("testkit: the replicas of %s did not sync within 10 s", primary.Addr)
	}
	for i := 0; i < opts.Sentinels; i++ {
		dir := t.TempDir()
		conf := []string{
			"sentinel resolve-hostnames no",
			fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d %d", s.Master, primary.Port, opts.Sentinels/2+1),
			fmt.Sprintf("sentinel down-after-milliseconds %s %d", s.Master, opts.DownAfter.Milliseconds()),
			fmt.Sprintf("sentinel failover-timeout %s %d", s.Master, 10000),
			fmt.Sprintf("sentinel parallel-syncs %s 1", s.Master),
		}
		if opts.Password != "" {
			conf = append(conf, fmt.Sprintf("sentinel auth-pass %s %s", s.Master, opts.Password))
		}
		if opts.SentinelPassword != "" {
			conf = append(conf, "sentinel sentinel-pass "+opts.SentinelPassword)
		}
		path := filepath.Join(dir, "sentinel.conf")
		if err := os.WriteFile(path, []byte(strings.Join(conf, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		s.Sentinels = append(s.Sentinels, startServer(t, opts.SentinelPassword, path, []string{"--sentinel"}))
	}
	// Every sentinel has found the replicas and the other sentinels (by
	// their hello messages): a failover can then be agreed on.
	err := waitFor(20*time.Second, func() bool {
		for _, sn := range s.Sentinels {
			m, err := sn.DoArray("SENTINEL", "MASTER", s.Master)
			if err != nil {
				return false
			}
			f := fields(m)
			if f["num-slaves"] != strconv.Itoa(opts.Replicas) || f["num-other-sentinels"] != strconv.Itoa(opts.Sentinels-1) {
				return false
			}
		}
		return true
	})
	if err != nil {
		t.Fatalf("testkit: the sentinels did not find the replicas and each other within 20 s")
	}
	return s
}

func startServer(t testing.TB, password, conf string, args []string) *Redis {
	t.Helper()
	r := &Redis{Dir: t.TempDir(), Password: password, t: t, conf: conf, args: args}
	if conf != "" {
		r.Dir = filepath.Dir(conf)
	}
	return startOnFreePort(t, r)
}

func fields(kv []string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

func waitFor(bound time.Duration, f func() bool) error {
	if !Poll(bound, 50*time.Millisecond, f) {
		return errors.New("testkit: timed out")
	}
	return nil
}

func (s *Sentinel) inSync(primary *Redis, replicas int) bool {
	info, err := primary.DoArray("INFO", "replication")
	if err != nil || len(info) == 0 {
		return false
	}
	online := strings.Count(info[0], "state=online")
	return online >= replicas
}

// URL returns the deployment's redis+sentinel:// URL: every sentinel, the
// master's name, db 0, the servers' password and the sentinels' one.
func (s *Sentinel) URL() string {
	var addrs []string
	for _, sn := range s.Sentinels {
		addrs = append(addrs, sn.Addr)
	}
	auth := ""
	if s.Password != "" {
		auth = ":" + s.Password + "@"
	}
	q := ""
	if s.SentinelPassword != "" {
		q = "?sentinel_password=" + s.SentinelPassword
	}
	return fmt.Sprintf("redis+sentinel://%s%s/%s/0%s", auth, strings.Join(addrs, ","), s.Master, q)
}

// PrimaryAddr asks the sentinels, in turn, for the primary's address.
func (s *Sentinel) PrimaryAddr() (string, error) {
	var lastErr error
	for _, sn := range s.Sentinels {
		if !sn.Running() {
			continue
		}
		a, err := sn.DoArray("SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.Master)
		if err == nil && len(a) == 2 {
			return net.JoinHostPort(a[0], a[1]), nil
		}
		lastErr = err
	}
	return "", fmt.Errorf("testkit: no sentinel names the primary: %v", lastErr)
}

// Primary returns the server the sentinels name as primary.
func (s *Sentinel) Primary() (*Redis, error) {
	addr, err := s.PrimaryAddr()
	if err != nil {
		return nil, err
	}
	for _, r := range s.Servers {
		if r.Addr == addr {
			return r, nil
		}
	}
	return nil, fmt.Errorf("testkit: the sentinels name %s, no server of this deployment", addr)
}

// Failover asks a sentinel to fail the primary over now (SENTINEL
// FAILOVER: no agreement needed, the primary is demoted to a replica).
func (s *Sentinel) Failover() error {
	_, err := s.Sentinels[0].Do("SENTINEL", "FAILOVER", s.Master)
	return err
}

// WaitNewPrimary waits until the sentinels name a primary other than old,
// which reports itself as master, and returns it.
func (s *Sentinel) WaitNewPrimary(old *Redis, bound time.Duration) (*Redis, error) {
	var p *Redis
	err := waitFor(bound, func() bool {
		r, err := s.Primary()
		if err != nil || r == old {
			return false
		}
		role, err := r.DoArray("ROLE")
		if err != nil || len(role) == 0 || role[0] != "master" {
			return false
		}
		p = r
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("testkit: no new primary within %s", bound)
	}
	return p, nil
}

// Rejoin starts a stopped server again as a replica of the current
// primary, as a supervisor restarting a crashed node would (the sentinels
// would demote it anyway), and waits until it is in sync.
func (s *Sentinel) Rejoin(r *Redis, bound time.Duration) error {
	p, err := s.Primary()
	if err != nil {
		return err
	}
	r.args = []string{"--replicaof", "127.0.0.1", strconv.Itoa(p.Port)}
	if s.Password != "" {
		r.args = append(r.args, "--masterauth", s.Password)
	}
	if err := r.Start(); err != nil {
		return err
	}
	if err := waitFor(bound, func() bool { return s.inSync(p, len(s.Servers)-1) }); err != nil {
		return fmt.Errorf("testkit: %s not in sync with %s within %s", r.Addr, p.Addr, bound)
	}
	return nil
}

// DoArray sends one command (its words as a RESP array, so that they may
// hold spaces) and returns the reply flattened to strings: a bulk or
// simple string as one, an array (nested ones flattened) as its elements,
// a nil as "". An error reply is an error.
func (r *Redis) DoArray(args ...string) ([]string, error) {
	c, err := net.DialTimeout("tcp", r.Addr, time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	rd := bufio.NewReader(c)
	send := func(words ...string) error {
		var b strings.Builder
		fmt.Fprintf(&b, "*%d\r\n", len(words))
		for _, w := range words {
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(w), w)
		}
		_, err := c.Write([]byte(b.String()))
		return err
	}
	if r.Password != "" {
		if err := send("AUTH", r.Password); err != nil {
			return nil, err
		}
		if _, err := readRESP(rd); err != nil {
			return nil, fmt.Errorf("testkit: AUTH: %w", err)
		}
	}
	if err := send(args...); err != nil {
		return nil, err
	}
	return readRESP(rd)
}

func readRESP(rd *bufio.Reader) ([]string, error) {
	line, err := rd.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return nil, errors.New("testkit: empty reply")
	}
	switch line[0] {
	case '+', ':':
		return []string{line[1:]}, nil
	case '-':
		return nil, errors.New("testkit: redis: " + line[1:])
	case '$':
		n, _ := strconv.Atoi(line[1:])
		if n < 0 {
			return []string{""}, nil
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(rd, b); err != nil {
			return nil, err
		}
		return []string{string(b[:n])}, nil
	case '*':
		n, _ := strconv.Atoi(line[1:])
		var out []string
		for i := 0; i < n; i++ {
			e, err := readRESP(rd)
			if err != nil {
				return nil, err
			}
			out = append(out, e...)
		}
		return out, nil
	}
	return nil, fmt.Errorf("testkit: reply %q not understood", line)
}
