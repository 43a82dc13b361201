package gateway

import (
	"bufio"
	"context"
	"io"
	"net"
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
