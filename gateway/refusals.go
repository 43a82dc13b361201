package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

// What the gateway refused a worker, kept for its wrapper to publish.
//
// The gateway holds no Redis credential and publishes nothing itself. A
// refusal made to a request that came through the wrapper's own loopback
// proxy could be seen by the wrapper in the answer, but the agent can
// call the worker's sockets directly (it runs beside the wrapper with the
// same uid): what the gateway refuses then is answered to the agent
// alone. So every refusal, whichever socket and whoever made the call, is
// kept here in the worker's refusal log, and its wrapper reads the log
// through the worker's egress.sock (GET RefusalsPath with the worker's
// token, a long poll) and publishes each as a warning of the task in
// flight, which the manager counts in agentvisor_refusals_total.

// RefusalsPath is the path on egress.sock (origin-form, not a proxy
// request) where the worker's wrapper reads its refusal log: GET
// RefusalsPath?after=<seq>&epoch=<epoch>, with the worker's token in
// ModelTokenHeader, answers a RefusalPage once there is a refusal past
// seq, or an empty one after refusalWait.
const RefusalsPath = "/agentvisor/refusals"

// maxRefusalsKept bounds a worker's refusal log: an agent refused in a
// loop costs the gateway this many entries, and the oldest are dropped
// (counted in RefusalPage.Dropped).
const maxRefusalsKept = 256

// refusalWait is how long a read of the refusal log waits for one.
var refusalWait = 25 * time.Second

// Refusal is one thing the gateway refused a worker. Tool and Code are
// the protocol's (protocol.RefusedTool*, protocol.Refused*).
type Refusal struct {
	Seq    uint64    `json:"seq"`
	Time   time.Time `json:"time"`
	Socket string    `json:"socket"` // the socket the refused call came in on
	Tool   string    `json:"tool"`
	Code   string    `json:"code"`
	// Request is what was asked (the request line: method and target),
	// Host and Port the destination refused, for an egress refusal.
	Request string `json:"request,omitempty"`
	Host    string `json:"host,omitempty"`
	Port    int    `json:"port,omitempty"`
	Reason  string `json:"reason"`
}

// RefusalPage is one read of a worker's refusal log: the refusals past
// the seq asked for, oldest first, and the seq to ask after next. Epoch
// names the log (a new one at each open of the worker, and at the
// gateway's restart): a read with another epoch starts from the log's
// beginning. Dropped counts the refusals past the seq asked for that the
// log no longer holds.
type RefusalPage struct {
	Epoch    string    `json:"epoch"`
	Next     uint64    `json:"next"`
	Dropped  uint64    `json:"dropped"`
	Refusals []Refusal `json:"refusals"`
}

// refusalLog is one worker's refusal log; every server of its sockets
// adds to it, its wrapper reads it.
type refusalLog struct {
	epoch string

	mu      sync.Mutex
	last    uint64        // the seq of the newest refusal (0: none yet)
	kept    []Refusal     // the newest, at most maxRefusalsKept, oldest first
	changed chan struct{} // closed (and replaced) at each add: wakes the readers
}

func newRefusalLog() *refusalLog {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return &refusalLog{epoch: hex.EncodeToString(b), changed: make(chan struct{})}
}

// add keeps r, numbered, and wakes the readers.
func (l *refusalLog) add(r Refusal) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.last++
	r.Seq, r.Time = l.last, time.Now().UTC()
	if len(l.kept) == maxRefusalsKept {
		l.kept = append(l.kept[:0], l.kept[1:]...)
	}
	l.kept = append(l.kept, r)
	close(l.changed)
	l.changed = make(chan struct{})
}

// page is what the log holds past after (from its beginning for another
// epoch), and a channel closed at the next add.
func (l *refusalLog) page(after uint64, epoch string) (RefusalPage, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if epoch != l.epoch || after > l.last {
		after = 0
	}
	p := RefusalPage{Epoch: l.epoch, Next: l.last, Refusals: []Refusal{}}
	for _, r := range l.kept {
		if r.Seq > after {
			p.Refusals = append(p.Refusals, r)
		}
	}
	first := l.last - uint64(len(p.Refusals)) // the seq before the oldest returned
	p.Dropped = first - after
	return p, l.changed
}

// wait returns the page past after, waiting up to d (or ctx) for one
// that is not empty.
func (l *refusalLog) wait(ctx context.Context, after uint64, epoch string, d time.Duration) RefusalPage {
	p, changed := l.page(after, epoch)
	if len(p.Refusals) > 0 || p.Dropped > 0 || p.Epoch != epoch {
		return p
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-changed:
		p, _ = l.page(after, epoch)
	case <-t.C:
	case <-ctx.Done():
	}
	return p
}

// refusalFeed serves a worker's refusal log on its egress.sock to the
// one holder of the worker's token: its wrapper.
type refusalFeed struct {
	side  workerSide // egress.sock's
	token tokenChecker
}

func (f refusalFeed) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	if !f.token.modelTokenOK(r.Header.Get(ModelTokenHeader)) {
		f.side.log.Warn("refusal log read refused: not the worker's token")
		f.side.refused(Refusal{Tool: protocol.RefusedToolNetwork, Code: protocol.RefusedModelToken,
			Request: printable(r.Method) + " " + RefusalsPath, Reason: "the refusal log is the wrapper's: not the worker's token"})
		rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
		rw.WriteHeader(http.StatusForbidden)
		_, _ = rw.Write([]byte("agentvisor gateway: refused: the refusal log is the wrapper's (" + ModelTokenHeader + ")\n"))
		return
	}
	if r.Method != http.MethodGet {
		badRequest(rw, r.Method+" "+RefusalsPath+": want GET")
		return
	}
	q := r.URL.Query()
	after, err := strconv.ParseUint(q.Get("after"), 10, 64)
	if q.Get("after") == "" {
		after, err = 0, nil
	}
	if err != nil {
		badRequest(rw, "after: want a refusal's seq, got "+strconv.Quote(q.Get("after")))
		return
	}
	p := f.side.refusals.wait(r.Context(), after, q.Get("epoch"), refusalWait)
	rw.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(rw).Encode(p)
}
