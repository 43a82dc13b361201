package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/testkit"
)

// A Redis PING round trip straight to Redis over TCP, and the same through
// the gateway (unix socket → relay → TCP), alternated on one run so that
// both see the same machine: on an open connection (what the wrapper's
// pool does), and with a connection made for it. Each b.N runs every
// sample again; the figures are of the last.
func BenchmarkRedisPing(b *testing.B) {
	r := testkit.StartRedis(b)
	dir, err := mkdirShort()
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	g, err := New(Config{Dir: dir, Redis: r.Addr})
	if err != nil {
		b.Fatal(err)
	}
	if err := g.Start(); err != nil {
		b.Fatal(err)
	}
	defer g.Stop(context.Background())
	if err := NewClient(dir).Open(context.Background(), "bench", nil); err != nil {
		b.Fatal(err)
	}
	sock := sockOf(dir, "bench", RedisSocket)
	dial := map[string]func() (net.Conn, error){
		"direct":  func() (net.Conn, error) { return net.Dial("tcp", r.Addr) },
		"gateway": func() (net.Conn, error) { return net.Dial("unix", sock) },
	}
	open := map[string]*bufConn{}
	for k, d := range dial {
		c, err := d()
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		open[k] = &bufConn{c, bufio.NewReader(c)}
	}
	const pings, connects = 5000, 500
	sample := func(k string, fresh bool) time.Duration {
		start := time.Now()
		c := open[k]
		if fresh {
			nc, err := dial[k]()
			if err != nil {
				b.Fatal(err)
			}
			defer nc.Close()
			c = &bufConn{nc, bufio.NewReader(nc)}
		}
		if err := c.ping(); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	for range 200 {
		sample("direct", false)
		sample("gateway", false)
	}
	b.ResetTimer()
	var lat map[string][]float64
	for range b.N {
		lat = map[string][]float64{}
		for range pings {
			for _, k := range []string{"direct", "gateway"} {
				lat[k] = append(lat[k], us(sample(k, false)))
			}
		}
		for range connects {
			for _, k := range []string{"direct", "gateway"} {
				lat[k+"-connect"] = append(lat[k+"-connect"], us(sample(k, true)))
			}
		}
	}
	b.StopTimer()
	for _, k := range []string{"direct", "gateway", "direct-connect", "gateway-connect"} {
		b.ReportMetric(rank(lat[k], 50), "redis-ping-"+k+"-p50-us")
		b.ReportMetric(rank(lat[k], 99), "redis-ping-"+k+"-p99-us")
	}
	b.ReportMetric(rank(lat["gateway"], 50)-rank(lat["direct"], 50), "redis-ping-gateway-added-p50-us")
	b.ReportMetric(rank(lat["gateway"], 99)-rank(lat["direct"], 99), "redis-ping-gateway-added-p99-us")
}

type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) ping() error {
	if _, err := io.WriteString(c, "*1\r\n$4\r\nPING\r\n"); err != nil {
		return err
	}
	line, err := c.r.ReadString('\n')
	if err == nil && line != "+PONG\r\n" {
		err = io.ErrUnexpectedEOF
	}
	return err
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }

// rank is the nearest-rank percentile p of xs.
func rank(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// An HTTPS GET to a loopback TLS server straight, and the same through a
// worker's egress.sock (CONNECT, the allowlist, the gateway's dial and
// its relay), alternated on one run: with a new connection for each
// request (dial or CONNECT, TLS handshake, GET: what a git clone or a
// package download starts with), and on an open connection (a kept-alive
// tunnel). Each b.N runs every sample again; the figures are of the last.
func BenchmarkEgressHTTPS(b *testing.B) {
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	ts.Config.ErrorLog = log.New(io.Discard, "", 0)
	ts.StartTLS()
	defer ts.Close()
	pool := x509.NewCertPool()
	pool.AddCert(ts.Certificate())
	dir, err := mkdirShort()
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	g, err := New(Config{Dir: dir, Redis: "127.0.0.1:1"})
	if err != nil {
		b.Fatal(err)
	}
	if err := g.Start(); err != nil {
		b.Fatal(err)
	}
	defer g.Stop(context.Background())
	addr := ts.Listener.Addr().String()
	if err := NewClient(dir).Open(context.Background(), "bench", []string{addr}); err != nil {
		b.Fatal(err)
	}
	sock := sockOf(dir, "bench", EgressSocket)
	client := func(viaGateway, keepAlive bool) *http.Client {
		tr := &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: pool, ServerName: "example.com"},
			DisableKeepAlives: !keepAlive,
		}
		if viaGateway {
			tr.Proxy = http.ProxyURL(&url.URL{Scheme: "http", Host: "egress.sock"})
			tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", sock)
			}
		}
		return &http.Client{Transport: tr, Timeout: 10 * time.Second}
	}
	clients := map[string]*http.Client{
		"direct": client(false, false), "gateway": client(true, false),
		"direct-open": client(false, true), "gateway-open": client(true, true),
	}
	u := "https://" + addr + "/"
	sample := func(k string) time.Duration {
		start := time.Now()
		resp, err := clients[k].Get(u)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatal(resp.Status)
		}
		return time.Since(start)
	}
	for range 50 {
		for k := range clients {
			sample(k)
		}
	}
	const fresh, open = 500, 3000
	b.ResetTimer()
	var lat map[string][]float64
	for range b.N {
		lat = map[string][]float64{}
		for range fresh {
			for _, k := range []string{"direct", "gateway"} {
				lat[k] = append(lat[k], ms(sample(k)))
			}
		}
		for range open {
			for _, k := range []string{"direct-open", "gateway-open"} {
				lat[k] = append(lat[k], ms(sample(k)))
			}
		}
	}
	b.StopTimer()
	for _, k := range []string{"direct", "gateway", "direct-open", "gateway-open"} {
		b.ReportMetric(rank(lat[k], 50), "egress-https-"+k+"-p50-ms")
		b.ReportMetric(rank(lat[k], 99), "egress-https-"+k+"-p99-ms")
	}
	b.ReportMetric(rank(lat["gateway"], 99)-rank(lat["direct"], 99), "egress-https-gateway-added-p99-ms")
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// A new connection and a PING through redis.sock of a gateway relaying to
// host:port, and through one following a Sentinel primary (the primary
// the sentinels name, cached for PrimaryCacheFor: a lookup of the three
// sentinels now and then), alternated on one run to the same primary.
// The run lasts several cache periods, so the p99 holds the lookups.
func BenchmarkGatewayRedisDialSentinel(b *testing.B) {
	s := testkit.StartSentinel(b, testkit.SentinelOptions{})
	socks := map[string]string{}
	for k, redis := range map[string]string{"direct": s.Servers[0].Addr, "sentinel": gatewaySentinelURL(s)} {
		dir, err := mkdirShort()
		if err != nil {
			b.Fatal(err)
		}
		defer os.RemoveAll(dir)
		g, err := New(Config{Dir: dir, Redis: redis})
		if err != nil {
			b.Fatal(err)
		}
		if err := g.Start(); err != nil {
			b.Fatal(err)
		}
		defer g.Stop(context.Background())
		if err := NewClient(dir).Open(context.Background(), "bench", nil); err != nil {
			b.Fatal(err)
		}
		socks[k] = sockOf(dir, "bench", RedisSocket)
	}
	sample := func(k string) time.Duration {
		start := time.Now()
		nc, err := net.Dial("unix", socks[k])
		if err != nil {
			b.Fatal(err)
		}
		defer nc.Close()
		if err := (&bufConn{nc, bufio.NewReader(nc)}).ping(); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	for range 100 {
		sample("direct")
		sample("sentinel")
	}
	b.ResetTimer()
	var lat map[string][]float64
	for range b.N {
		lat = map[string][]float64{}
		end := time.Now().Add(4 * PrimaryCacheFor)
		for time.Now().Before(end) {
			for _, k := range []string{"direct", "sentinel"} {
				lat[k] = append(lat[k], us(sample(k)))
			}
			time.Sleep(time.Millisecond)
		}
	}
	b.StopTimer()
	for _, k := range []string{"direct", "sentinel"} {
		b.ReportMetric(rank(lat[k], 50), "redis-connect-gateway-"+k+"-p50-us")
		b.ReportMetric(rank(lat[k], 99), "redis-connect-gateway-"+k+"-p99-us")
	}
}
