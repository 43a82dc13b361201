package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/gateway"
	"github.com/agentvisor/agentvisor/testkit"
)

// The worker-gateway process's resident memory (VmRSS): started with no
// worker, with 100 workers open (each a directory and two listening
// sockets), and with one relayed connection open on each of them; and how
// long the 100 Opens took.
func BenchmarkGateway100Workers(b *testing.B) {
	r := testkit.StartRedis(b)
	model, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer model.Close()
	for range b.N {
		dir := shortDir(b)
		p := startProc(b, dir, "GATEWAY_REDIS="+r.Addr, "GATEWAY_MODEL="+model.Addr().String(), "LOG_LEVEL=warn")
		c := gateway.NewClient(dir)
		ctx := context.Background()
		time.Sleep(200 * time.Millisecond)
		idle := vmRSS(b, p.cmd.Process.Pid)
		start := time.Now()
		for i := range 100 {
			if err := c.Open(ctx, fmt.Sprintf("worker-%03d", i), nil); err != nil {
				b.Fatal(err)
			}
		}
		opened := time.Since(start)
		time.Sleep(200 * time.Millisecond)
		open := vmRSS(b, p.cmd.Process.Pid)
		var conns []net.Conn
		for i := range 100 {
			conn, err := net.Dial("unix", filepath.Join(dir, fmt.Sprintf("worker-%03d", i), gateway.RedisSocket))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := conn.Write([]byte("PING\r\n")); err != nil {
				b.Fatal(err)
			}
			if line, err := bufio.NewReader(conn).ReadString('\n'); err != nil || line != "+PONG\r\n" {
				b.Fatalf("%q %v", line, err)
			}
			conns = append(conns, conn)
		}
		time.Sleep(200 * time.Millisecond)
		withConns := vmRSS(b, p.cmd.Process.Pid)
		b.ReportMetric(idle/1024, "gateway-idle-rss-MB")
		b.ReportMetric(open/1024, "gateway-100-workers-rss-MB")
		b.ReportMetric(withConns/1024, "gateway-100-workers-100-conns-rss-MB")
		b.ReportMetric((open-idle)/100, "gateway-rss-per-worker-KB")
		b.ReportMetric(float64(opened.Microseconds())/1000/100, "gateway-open-mean-ms")
		for _, conn := range conns {
			conn.Close()
		}
		p.cmd.Process.Kill()
		<-p.exited
	}
}

// vmRSS is process pid's VmRSS in KiB.
func vmRSS(b *testing.B, pid int) float64 {
	b.Helper()
	s, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(s), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb
		}
	}
	b.Fatal("no VmRSS")
	return 0
}
