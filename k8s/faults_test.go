package k8s_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/agentvisor/agentvisor/client"
	"github.com/agentvisor/agentvisor/protocol"
)

// The fault cases on Kubernetes count what the Docker fault suite
// (faults/) counts, and each writes its row of FAULTS.md: when
// FAULTS_K8S_OUT names a file (`make faults` sets it), the row is
// appended to it as a line of JSON, with the field names of faults.Row,
// and the fault suite's TestMain puts the rows in FAULTS.md's table "On
// Kubernetes".

// faultRow is one case's row: the fields of faults.Row (faults/table.go).
type faultRow struct {
	Case           string
	Fault          string
	RecoveredMeans string
	DetectedMeans  string
	Tasks          int
	Lost           int
	Duplicated     int
	Orphans        int
	Detection      string
	Recovery       string
	Pass           bool
	Notes          string
	Took           time.Duration
}

// request is one task or command a case sent, to be answered exactly once.
type request struct {
	id      string
	command bool
	what    string
	// ok says whether the request's one answer is what the case demands
	// (nil: any answer).
	ok func(answer) bool
}

// answer is one Output or Reply of a request.
type answer struct {
	ok   bool   // a complete Output, an ok Reply
	desc string // "complete", "failed KILLED", "ok", "RESOURCE_EXHAUSTED"
}

// faultCase is the count of one case: the requests it sent, the fault's
// time and the runtime's answers to it, and its end (finish, run when the
// test ends): the final shutdown of its managers, the pods, claims and
// keys left counted, the row recorded.
type faultCase struct {
	d                 *deployment
	row               faultRow
	begun             time.Time
	mu                sync.Mutex
	reqs              []request
	notes             []string
	injected          time.Time
	detected, healthy time.Time
}

// faultCase starts the count of a case of the deployment. Its finish
// runs first of the test's cleanups: before the deployment's own (the
// managers stopped, the namespace deleted), which it needs.
func (d *deployment) faultCase(name, fault, recovered, detected string) *faultCase {
	fc := &faultCase{d: d, begun: time.Now(), row: faultRow{Case: name, Fault: fault, RecoveredMeans: recovered, DetectedMeans: detected}}
	d.fc = fc
	d.t.Cleanup(fc.finish)
	return fc
}

// Inject marks the moment of the fault.
func (fc *faultCase) Inject() {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.injected = time.Now()
}

// Detected marks the runtime's first visible answer to the fault (the
// first call counts).
func (fc *faultCase) Detected() {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if fc.detected.IsZero() {
		fc.detected = time.Now()
	}
}

// Recovered marks the moment the case counts as recovered.
func (fc *faultCase) Recovered() {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.healthy = time.Now()
}

// Note adds a line to the row's notes.
func (fc *faultCase) Note(format string, args ...any) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.notes = append(fc.notes, fmt.Sprintf(format, args...))
}

func (fc *faultCase) add(r request) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.reqs = append(fc.reqs, r)
}

// complete: a task's answer must be a complete Output.
func complete(a answer) bool { return a.ok }

// replyOK: a command's answer must be an ok Reply.
func replyOK(a answer) bool { return a.ok }

// do sends a command, counted when the deployment has a case.
func (d *deployment) do(ctx context.Context, cmd protocol.Command, what string, ok func(answer) bool) (protocol.Reply, error) {
	if cmd.ID == "" {
		b := make([]byte, 8)
		_, _ = rand.Read(b)
		cmd.ID = "cmd-" + hex.EncodeToString(b)
	}
	if d.fc != nil {
		d.fc.add(request{id: cmd.ID, command: true, what: what, ok: ok})
	}
	return d.commands.Do(ctx, cmd)
}

// send sends a task, counted when the deployment has a case.
func (d *deployment) send(ctx context.Context, worker, prompt string, ok func(answer) bool) (client.Sent, error) {
	sent, err := d.tasks.Send(ctx, worker, protocol.Task{Prompt: prompt})
	if err == nil && d.fc != nil {
		d.fc.add(request{id: sent.RequestID, what: "task " + prompt + " on " + worker, ok: ok})
	}
	return sent, err
}

// answers reads every answer the deployment's Redis holds, by request id:
// every output stream of its prefix, and its commands' reply stream.
func (d *deployment) answers(ctx context.Context) map[string][]answer {
	out := map[string][]answer{}
	var streams []string
	iter := d.rc.Scan(ctx, 0, d.keys.Prefix+":*:output", 1000).Iterator()
	for iter.Next(ctx) {
		streams = append(streams, iter.Val())
	}
	for _, s := range streams {
		for _, m := range d.rc.XRange(ctx, s, "-", "+").Val() {
			data, err := protocol.EntryData(m.Values)
			if err != nil {
				continue
			}
			var o protocol.Output
			if json.Unmarshal(data, &o) != nil || o.RequestID == "" {
				continue
			}
			desc := string(o.Status)
			if o.Error != nil {
				desc += " " + string(o.Error.Code)
			}
			out[o.RequestID] = append(out[o.RequestID], answer{ok: o.Status == protocol.StatusComplete, desc: desc})
		}
	}
	for _, m := range d.rc.XRange(ctx, d.keys.Replies(d.commands.Name), "-", "+").Val() {
		data, err := protocol.EntryData(m.Values)
		if err != nil {
			continue
		}
		var r protocol.Reply
		if json.Unmarshal(data, &r) != nil || r.CommandID == "" {
			continue
		}
		desc := "ok"
		if !r.OK && r.Error != nil {
			desc = string(r.Error.Code)
		}
		out[r.CommandID] = append(out[r.CommandID], answer{ok: r.OK, desc: desc})
	}
	return out
}

// leftOver counts what the deployment left after its managers' final
// shutdown: its pods (after 30 s for those still terminating), its
// volume claims, and its orphan keys: a worker of the registry without a
// status, and, of a worker the registry does not hold, a status that
// never expires but is not a hibernated worker's (a retired worker's
// expires after the retention; a hibernated one lives on, its pod gone)
// or a heartbeat (its retirement deletes it).
func (d *deployment) leftOver(ctx context.Context) (int, []string) {
	var notes []string
	var ps []pod
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Second) {
		if ps = d.pods(); len(ps) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, p := range ps {
		notes = append(notes, "pod "+p.Metadata.Name+" left ("+p.Status.Phase+")")
	}
	var claims struct {
		Items []struct{ Metadata struct{ Name string } }
	}
	if err := json.Unmarshal(kubectl(d.t, d.env, nil, "get", "pvc", "-n", d.ns, "-o", "json"), &claims); err != nil {
		d.t.Errorf("the namespace's claims: %v", err)
	}
	for _, c := range claims.Items {
		notes = append(notes, "claim "+c.Metadata.Name+" left")
	}
	members := map[string]bool{}
	for _, id := range d.rc.SMembers(ctx, d.keys.Workers()).Val() {
		members[id] = true
		if d.rc.Exists(ctx, d.keys.Status(id)).Val() == 0 {
			notes = append(notes, "worker "+id+" registered without a status")
		}
	}
	for _, k := range []struct {
		what, prefix string
		ok           func(key string) bool
	}{
		{"status", d.keys.Status(""), func(key string) bool {
			return d.rc.TTL(ctx, key).Val() > 0 || d.rc.HGet(ctx, key, protocol.StatusFieldState).Val() == string(protocol.WorkerHibernated)
		}},
		{"heartbeat", d.keys.Heartbeat(""), func(string) bool { return false }},
	} {
		iter := d.rc.Scan(ctx, 0, k.prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			id := strings.TrimPrefix(iter.Val(), k.prefix)
			if strings.Contains(id, ":") || members[id] || k.ok(iter.Val()) {
				continue
			}
			notes = append(notes, k.what+" of worker "+id+" outside the registry")
		}
	}
	return len(notes), notes
}

// finish is the case's end: the final shutdown of its managers, what was
// left counted, the row recorded (written to FAULTS_K8S_OUT when set),
// and the verdict.
func (fc *faultCase) finish() {
	d, t := fc.d, fc.d.t
	d.stopManagers()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	all := d.answers(ctx)
	fc.mu.Lock()
	defer fc.mu.Unlock()
	row := fc.row
	notes := fc.notes
	for _, r := range fc.reqs {
		as := all[r.id]
		switch {
		case len(as) == 0:
			row.Lost++
			notes = append(notes, r.what+": no answer")
		case r.ok != nil && !r.ok(as[0]):
			row.Lost++
			notes = append(notes, r.what+": answered "+as[0].desc)
		}
		if len(as) > 1 {
			row.Duplicated++
			notes = append(notes, fmt.Sprintf("%s: %d answers", r.what, len(as)))
		}
	}
	row.Tasks = len(fc.reqs)
	n, left := d.leftOver(ctx)
	row.Orphans = n
	notes = append(notes, left...)
	since := func(at time.Time) string {
		if at.IsZero() || fc.injected.IsZero() {
			return "—"
		}
		return at.Sub(fc.injected).Round(100 * time.Millisecond).String()
	}
	row.Detection, row.Recovery = since(fc.detected), since(fc.healthy)
	if fc.row.DetectedMeans == "" {
		row.Detection = "—"
	}
	if !fc.injected.IsZero() && fc.healthy.IsZero() {
		row.Recovery = "not recovered"
		notes = append(notes, "not recovered")
	}
	row.Took = time.Since(fc.begun)
	row.Pass = row.Lost == 0 && row.Duplicated == 0 && row.Orphans == 0 && !fc.healthy.IsZero() && !t.Failed()
	if !row.Pass && !t.Failed() {
		t.Errorf("%s: %d lost, %d duplicated, %d orphans of %d requests (goal 0, 0, 0, recovered): %s",
			row.Case, row.Lost, row.Duplicated, row.Orphans, row.Tasks, strings.Join(notes, "; "))
	}
	if t.Failed() && !row.Pass && len(notes) == 0 {
		notes = append(notes, "the test failed: its log says why")
	}
	row.Notes = strings.Join(notes, "; ")
	t.Logf("row: %s | tasks %d | lost %d | duplicated %d | orphans %d | detection %s | recovery %s | pass %v | %s",
		row.Case, row.Tasks, row.Lost, row.Duplicated, row.Orphans, row.Detection, row.Recovery, row.Pass, row.Notes)
	if path := os.Getenv("FAULTS_K8S_OUT"); path != "" {
		line, _ := json.Marshal(row)
		f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err == nil {
			_, err = f.Write(append(line, '\n'))
			f.Close()
		}
		if err != nil {
			t.Errorf("write the row to FAULTS_K8S_OUT %s: %v", path, err)
		}
	}
}
