package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
)

// Expect is what a request's answer must be for the request to count as
// served.
type Expect int

const (
	// AnyAnswer: any one answer (a failed Output, a refused command) serves
	// the request; the fault may cost the work, not the answer.
	AnyAnswer Expect = iota
	// Complete: a task's Output must say complete; the fault must not cost
	// the work (a healthy worker killed by a Redis outage loses it).
	Complete
	// ReplyOK: a command's reply must be ok.
	ReplyOK
	// Refused: a command's reply must refuse it (a pause of a busy worker).
	Refused
)

// Met reports whether a (a request's first answer) is what e expects.
func (e Expect) Met(a Answer) bool {
	switch e {
	case Complete, ReplyOK:
		return a.OK
	case Refused:
		return !a.OK
	}
	return true
}

// Request is one task or command a case sent, which must be answered
// exactly once: a task by one Output on its worker's output stream, a
// command by one Reply on the case's reply stream.
type Request struct {
	ID      string // request_id or command_id
	Command bool
	What    string // for notes: "create", "task on w2"...
	Expect  Expect
	Sent    time.Time
	// Deadline, when set, is when the answer must have come: a later one
	// is late, and counts as lost (a user waiting for it gave up).
	Deadline time.Time
}

// Answer is one Output or Reply seen for a request.
type Answer struct {
	At   time.Time // when Redis stored it (its entry id)
	OK   bool      // complete Output, ok Reply
	Desc string    // "complete", "failed KILLED", "ok", "RESOURCE_EXHAUSTED"...
	// Msg is the error's message, when the answer is one: what a failed
	// case prints, so that its cause is known from the run that failed.
	Msg string
	// Worker is the worker the answer names (an Output's worker_id, a
	// reply's worker_id).
	Worker string
}

// Ledger records the requests of a case and finds their answers in Redis:
// every output stream of the case's key prefix, and the case's reply
// stream.
type Ledger struct {
	rc      *redis.Client
	keys    protocol.Keys
	replies string

	mu   sync.Mutex
	reqs []*Request
	byID map[string]*Request
}

// NewLedger returns the ledger of the requests sent on keys' streams,
// whose commands are answered on the stream replies.
func NewLedger(rc *redis.Client, keys protocol.Keys, replies string) *Ledger {
	return &Ledger{rc: rc, keys: keys, replies: replies, byID: map[string]*Request{}}
}

// Add records a request sent.
func (l *Ledger) Add(r *Request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reqs = append(l.reqs, r)
	l.byID[r.ID] = r
}

// Get returns a request by id.
func (l *Ledger) Get(id string) *Request {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.byID[id]
}

// SetDeadline sets the deadline of requests that have none yet.
func (l *Ledger) SetDeadline(ids []string, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range ids {
		if r := l.byID[id]; r != nil && r.Deadline.IsZero() {
			r.Deadline = at
		}
	}
}

// Requests returns the requests in the order they were sent.
func (l *Ledger) Requests() []*Request {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*Request(nil), l.reqs...)
}

// Answers reads every answer the case's Redis holds, by request id, oldest
// first.
func (l *Ledger) Answers(ctx context.Context) (map[string][]Answer, error) {
	out := map[string][]Answer{}
	var streams []string
	var cursor uint64
	for {
		keys, next, err := l.rc.Scan(ctx, cursor, l.keys.Prefix+":*:output", 1000).Result()
		if err != nil {
			return nil, err
		}
		streams = append(streams, keys...)
		if cursor = next; cursor == 0 {
			break
		}
	}
	for _, s := range streams {
		msgs, err := l.rc.XRange(ctx, s, "-", "+").Result()
		if err != nil {
			continue // not a stream (a case may break one on purpose)
		}
		for _, m := range msgs {
			data, err := protocol.EntryData(m.Values)
			if err != nil {
				continue
			}
			if _, typ, err := protocol.PeekType(data); err != nil || typ != protocol.TypeOutput {
				continue
			}
			// Not the strict decoder: an answer with a field this checkout
			// does not know yet is an answer all the same.
			var o protocol.Output
			if json.Unmarshal(data, &o) != nil || o.RequestID == "" {
				continue
			}
			desc, msg := string(o.Status), ""
			if o.Error != nil {
				desc, msg = desc+" "+string(o.Error.Code), o.Error.Message
			}
			out[o.RequestID] = append(out[o.RequestID], Answer{At: entryTime(m.ID), OK: o.Status == protocol.StatusComplete, Desc: desc, Msg: msg, Worker: o.WorkerID})
		}
	}
	msgs, err := l.rc.XRange(ctx, l.replies, "-", "+").Result()
	if err != nil {
		return nil, err
	}
	for _, m := range msgs {
		data, err := protocol.EntryData(m.Values)
		if err != nil {
			continue
		}
		var r protocol.Reply
		if json.Unmarshal(data, &r) != nil || r.CommandID == "" {
			continue
		}
		desc, msg := "ok", ""
		if !r.OK {
			desc = "error"
			if r.Error != nil {
				desc, msg = string(r.Error.Code), r.Error.Message
			}
		}
		out[r.CommandID] = append(out[r.CommandID], Answer{At: entryTime(m.ID), OK: r.OK, Desc: desc, Msg: msg, Worker: r.WorkerID})
	}
	for id := range out {
		sort.SliceStable(out[id], func(i, j int) bool { return out[id][i].At.Before(out[id][j].At) })
	}
	return out, nil
}

// entryTime is when Redis stored an entry: the milliseconds of its id.
func entryTime(id string) time.Time {
	var ms int64
	fmt.Sscanf(id, "%d-", &ms)
	return time.UnixMilli(ms)
}

// Tally is what a case's requests came to.
type Tally struct {
	Sent       int
	Lost       int // no answer, a late one, or one that is not what the request expects
	Duplicated int // more than one answer
	MaxAnswers int // the most answers one request got
	Notes      []string
}

// Tally counts lost and duplicated requests. lostBy is the answers seen
// when the case's checks ended (an answer that came only with the final
// shutdown does not save a request); dupBy is the last look (a duplicate
// counts whenever it came).
func (l *Ledger) Tally(lostBy, dupBy map[string][]Answer) Tally {
	var t Tally
	for _, r := range l.Requests() {
		t.Sent++
		as := lostBy[r.ID]
		switch {
		case len(as) == 0:
			t.Lost++
			t.Notes = append(t.Notes, fmt.Sprintf("%s (%s): no answer", r.ID, r.What))
		case !r.Deadline.IsZero() && as[0].At.After(r.Deadline):
			t.Lost++
			t.Notes = append(t.Notes, fmt.Sprintf("%s (%s): answered only after %s (bound %s)", r.ID, r.What,
				roundDur(as[0].At.Sub(r.Sent)), roundDur(r.Deadline.Sub(r.Sent))))
		case !r.Expect.Met(as[0]):
			t.Lost++
			t.Notes = append(t.Notes, fmt.Sprintf("%s (%s): answered %s", r.ID, r.What, as[0].describe()))
		}
		t.MaxAnswers = max(t.MaxAnswers, len(dupBy[r.ID]))
		if n := len(dupBy[r.ID]); n > 1 {
			t.Duplicated++
			var descs []string
			for _, a := range dupBy[r.ID] {
				descs = append(descs, a.Desc)
			}
			t.Notes = append(t.Notes, fmt.Sprintf("%s (%s): %d answers (%s)", r.ID, r.What, n, strings.Join(descs, ", ")))
		}
	}
	return t
}

func roundDur(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return fmt.Sprintf("%.0f s", d.Seconds())
	case d >= time.Second:
		return fmt.Sprintf("%.1f s", d.Seconds())
	}
	return fmt.Sprintf("%d ms", d.Milliseconds())
}

// describe is an answer as a note says it: its description, and the
// error's message when it has one.
func (a Answer) describe() string {
	if a.Msg == "" {
		return a.Desc
	}
	return a.Desc + " (" + a.Msg + ")"
}
