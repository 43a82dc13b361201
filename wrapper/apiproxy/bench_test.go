package apiproxy

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// BenchmarkProxyLatency measures what the proxy adds to a model API call
// on loopback: the same streaming request to the stub model, directly and
// through the proxy, alternately, each timed to the last byte of its
// answer. On a shared 2-core machine one run's p99 is one scheduling
// hiccup, so the figures are the median, over 7 rounds of 300 pairs, of
// each round's p99. `make bench` reads the two p99 figures
// (scripts/benchtable.go).
func BenchmarkProxyLatency(b *testing.B) {
	stub := startStub(b)
	p, err := Start("127.0.0.1:0", Config{Upstream: stub.URL, APIKey: realKey})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	// A request of the size Claude Code sends at its first turn (its
	// system prompt and tool definitions): about 20 KB.
	body := []byte(fmt.Sprintf(`{"model":"m","stream":true,"system":%q,"messages":[{"role":"user","content":"hi"}]}`,
		strings.Repeat("You are a coding agent. ", 850)))
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	call := func(url, key string) time.Duration { return timedCall(b, client, url, key, body) }
	const warmup, rounds, pairs = 50, 7, 300
	for range warmup {
		call(stub.URL, realKey)
		call(p.URL, p.Token)
	}
	b.ResetTimer()
	var d99s, p99s, added50 []float64
	for range b.N {
		for range rounds {
			stub.Reset()
			var direct, proxied []float64
			for range pairs {
				direct = append(direct, ms(call(stub.URL, realKey)))
				proxied = append(proxied, ms(call(p.URL, p.Token)))
			}
			d99s, p99s = append(d99s, p99(direct)), append(p99s, p99(proxied))
			added50 = append(added50, p50(proxied)-p50(direct))
		}
	}
	d99, v99 := p50(d99s), p50(p99s)
	b.ReportMetric(d99, "model-api-direct-p99-ms")
	b.ReportMetric(v99, "model-api-via-proxy-p99-ms")
	b.ReportMetric(v99-d99, "model-api-proxy-added-p99-ms")
	b.ReportMetric(p50(added50), "model-api-proxy-added-p50-ms")
}

// timedCall posts body to a Messages API at url with key and returns the
// time to the last byte of its answer.
func timedCall(b *testing.B, client *http.Client, url, key string, body []byte) time.Duration {
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/messages?beta=true", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Api-Key", key)
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	d := time.Since(start)
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("%s: %s", url, resp.Status)
	}
	return d
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// p99 and p50 are nearest-rank percentiles.
func p99(xs []float64) float64 { return rank(xs, 99) }
func p50(xs []float64) float64 { return rank(xs, 50) }

func rank(xs []float64, pct int) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	i := (len(s)*pct+99)/100 - 1
	return s[max(i, 0)]
}
