package egress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/agentvisor/agentvisor/gateway"
)

// Refusals reads what a sealed worker's gateway refused it, on any of its
// sockets and whoever in the container made the call, from the gateway's
// refusal log (gateway.RefusalsPath on the egress socket, with the
// worker's token): the one source of the worker's network, model and
// connection refusals. Each page read is handed to the callback, which
// publishes it.
type Refusals struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// minPageGap bounds how often the log is read while it fills: an
// agent refused in a loop costs a few pages a second, each at most the
// gateway's bound of refusals.
const minPageGap = 250 * time.Millisecond

// WatchRefusals starts reading the refusal log behind socket; got sees
// each page that is not empty, in order, from the reading goroutine (it
// may block: the log waits). Stop ends it.
func WatchRefusals(socket, token string, got func(gateway.RefusalPage), log *slog.Logger) *Refusals {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Refusals{cancel: cancel, done: make(chan struct{})}
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
		Proxy: nil,
	}}
	go r.run(ctx, hc, token, got, log)
	return r
}

// Stop ends the reading and waits for it. A page being read is lost:
// the wrapper stops with the worker.
func (r *Refusals) Stop() {
	r.cancel()
	<-r.done
}

// errNoLog is a gateway that keeps no refusal log (one older than it).
var errNoLog = errors.New("egress: the gateway keeps no refusal log")

func (r *Refusals) run(ctx context.Context, hc *http.Client, token string, got func(gateway.RefusalPage), log *slog.Logger) {
	defer close(r.done)
	defer hc.CloseIdleConnections()
	var after uint64
	epoch := ""
	failures := 0
	for {
		start := time.Now()
		p, err := readPage(ctx, hc, token, after, epoch)
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, errNoLog):
			log.Warn("egress: the gateway keeps no refusal log: refusals it makes are not published", "err", err)
			return
		case err != nil:
			failures++
			if failures == 3 { // a gateway restarting is a few failures; more is news
				log.Warn("egress: the refusal log does not answer", "err", err)
			}
			if !sleep(ctx, min(time.Duration(failures)*500*time.Millisecond, 5*time.Second)) {
				return
			}
			continue
		}
		failures = 0
		sameEpoch := p.Epoch == epoch
		after, epoch = p.Next, p.Epoch
		if len(p.Refusals) == 0 && p.Dropped == 0 {
			// The long poll's end, or the log's epoch learnt: read again
			// at once (a refusal just after would wait out a gap, and
			// miss the task it was made in), unless the gateway answers
			// an empty page without waiting.
			if sameEpoch && time.Since(start) < 10*time.Millisecond && !sleep(ctx, minPageGap) {
				return
			}
			continue
		}
		got(p)
		if !sleep(ctx, minPageGap-time.Since(start)) {
			return
		}
	}
}

// readPage reads one page of the log past after (a long poll).
func readPage(ctx context.Context, hc *http.Client, token string, after uint64, epoch string) (gateway.RefusalPage, error) {
	var p gateway.RefusalPage
	q := url.Values{"after": {strconv.FormatUint(after, 10)}, "epoch": {epoch}}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://gateway"+gateway.RefusalsPath+"?"+q.Encode(), nil)
	if err != nil {
		return p, err
	}
	req.Header.Set(gateway.ModelTokenHeader, token)
	resp, err := hc.Do(req)
	if err != nil {
		return p, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusBadRequest, http.StatusNotFound:
		return p, fmt.Errorf("%w (%s)", errNoLog, resp.Status)
	default:
		return p, fmt.Errorf("egress: the refusal log: %s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
		return p, fmt.Errorf("egress: the refusal log: %w", err)
	}
	return p, nil
}

// sleep waits d, or less when ctx ends (false then).
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
