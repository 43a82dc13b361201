package apiproxy

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// BenchmarkProxyThroughGateway: the streaming model call of
// BenchmarkProxyLatency through the wrapper's proxy as a sealed worker
// makes it (plain HTTP with the worker's token to the gateway's
// model.sock, a real gateway forwarding it to the stub over TLS) against
// the same proxy speaking TLS to the stub directly, alternately, in the
// same run: what the sealed worker's model path adds.
func BenchmarkProxyThroughGateway(b *testing.B) {
	stub := startStub(b)
	url, roots := tlsStub(b, stub)
	_, sock := startGateway(b, strings.TrimPrefix(url, "https://"), roots, workerToken)
	direct, err := Start("127.0.0.1:0", Config{Upstream: url, APIKey: realKey, TLS: roots})
	if err != nil {
		b.Fatal(err)
	}
	defer direct.Close()
	sealed, err := Start("127.0.0.1:0", Config{Upstream: url, APIKey: realKey, UpstreamSocket: sock, UpstreamToken: workerToken})
	if err != nil {
		b.Fatal(err)
	}
	defer sealed.Close()
	body := []byte(fmt.Sprintf(`{"model":"m","stream":true,"system":%q,"messages":[{"role":"user","content":"hi"}]}`,
		strings.Repeat("You are a coding agent. ", 850)))
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	call := func(p *Proxy) time.Duration { return timedCall(b, client, p.URL, p.Token, body) }
	const warmup, rounds, pairs = 50, 7, 300
	for range warmup {
		call(direct)
		call(sealed)
	}
	b.ResetTimer()
	var d99s, s99s []float64
	for range b.N {
		for range rounds {
			stub.Reset()
			var d, s []float64
			for range pairs {
				d = append(d, ms(call(direct)))
				s = append(s, ms(call(sealed)))
			}
			d99s, s99s = append(d99s, p99(d)), append(s99s, p99(s))
		}
	}
	b.ReportMetric(p50(d99s), "model-api-proxy-direct-p99-ms")
	b.ReportMetric(p50(s99s), "model-api-proxy-gateway-p99-ms")
}
