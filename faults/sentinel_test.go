package faults

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

// TestSentinelFailover fails the primary of a Redis Sentinel deployment
// over in the middle of a load of tasks: by SENTINEL FAILOVER (the old
// primary demoted to a replica), and by SIGKILL of the primary (restarted
// as a replica once the sentinels promoted the other, as a supervisor
// would).
func TestSentinelFailover(t *testing.T) {
	kinds := []string{"SENTINEL FAILOVER"}
	if Long() {
		kinds = append(kinds, "primary SIGKILL") // make faults: both ways
	}
	for _, kind := range kinds {
		t.Run(strings.ReplaceAll(kind, " ", "_"), func(t *testing.T) { sentinelFailover(t, kind) })
	}
}

func sentinelFailover(t *testing.T, kind string) {
	const workers = 4
	const load = 12 * time.Second
	const faultAfter = 4 * time.Second
	fault := "SENTINEL FAILOVER asked of a sentinel: the replica is promoted, the old primary demoted to its replica."
	if kind == "primary SIGKILL" {
		fault = "The primary gets SIGKILL: the sentinels agree it is down (1 s) and promote the replica; the old primary is restarted as a replica of the new one once it is named."
	}
	c := NewCase(t, Options{
		Name: "Redis Sentinel: " + kind + " mid-load (4 workers, a task every 100 ms)",
		Fault: "A primary with a password (so workers connect as ACL users of their own), a replica and three sentinels on loopback; the manager " +
			"and the case reach Redis through the redis+sentinel:// URL, the sealed workers through their gateway, which relays to the primary the sentinels name; " +
			"all WAIT for one replica on the writes that matter (the default). Four long-lived workers " +
			"get a task (fake agent, 200 ms) every 100 ms for 12 s, round robin; 4 s in: " + fault,
		Recovered: "every task answered complete within 60 s of the load's end, no worker replaced; at most 2 answers per task (PROTOCOL.md: one more per failover). " +
			"Recovery time: the fault to the first output every worker stored on the new primary (it authenticates there again).",
		Detected:     "the fault to the leader making the worker Redis users again on the new primary (its log).",
		Sentinel:     true,
		ExtraAnswers: 1,
	})
	m := c.StartManager("m1", nil)
	ws := c.CreateMany(workers, protocol.KindLongLived, 90*time.Second)
	for _, w := range ws {
		if _, ok := c.WaitEvent(w, protocol.EventStarted, "", 30*time.Second); !ok {
			t.Fatalf("set-up: worker %s did not start within 30 s", short(w))
		}
	}
	creates := c.WatchCreations()

	var (
		wg                sync.WaitGroup
		faultAt, promoted time.Time
		faultErr          error
	)
	doFault := func() {
		defer wg.Done()
		old, err := c.Sentinel.Primary()
		if err != nil {
			faultErr = err
			return
		}
		faultAt = time.Now()
		if kind == "primary SIGKILL" {
			err = old.Kill()
		} else {
			err = c.Sentinel.Failover()
		}
		if err != nil {
			faultErr = err
			return
		}
		nw, err := c.Sentinel.WaitNewPrimary(old, 30*time.Second)
		if err != nil {
			faultErr = err
			return
		}
		promoted = time.Now()
		c.Note("%s: the sentinels named %s primary %s after the fault", kind, nw.Addr, roundDur(promoted.Sub(faultAt)))
		if kind == "primary SIGKILL" {
			faultErr = c.Sentinel.Rejoin(old, 30*time.Second)
			c.Note("the old primary back as a replica, in sync, %s after the fault", roundDur(time.Since(faultAt)))
		}
	}
	var sent []string
	byWorker := map[string][]string{}
	start, faulted := time.Now(), false
	for i := 0; time.Since(start) < load; i++ {
		if !faulted && time.Since(start) >= faultAfter {
			faulted = true
			wg.Add(1)
			go doFault()
		}
		w := ws[i%workers]
		req := c.Task(w, "fake:sleep-200 a task of the load", Complete)
		sent = append(sent, req)
		byWorker[w] = append(byWorker[w], req)
		time.Sleep(100 * time.Millisecond)
	}
	wg.Wait()
	if faultErr != nil {
		t.Fatalf("the fault: %v", faultErr)
	}
	t.Logf("%d tasks sent", len(sent))
	bound := 60 * time.Second
	_, ok := c.WaitAnswered(sent, bound)
	c.Settle()
	c.Unwanted(len(creates.Since(faultAt)), "workers made after the failover (a healthy worker judged dead?)")
	if at, found := logTime(m.Log, "worker Redis users made again"); found && at.After(faultAt) {
		c.Detection(at.Sub(faultAt))
	} else {
		c.Note("the leader made no worker Redis user again after the fault")
	}
	if !ok {
		c.NotRecovered(bound, "tasks not all answered complete within 60 s of the load's end")
		return
	}
	// Every worker stored an output on the new primary: it authenticated
	// there, as its own ACL user.
	answers := c.answers()
	var last time.Time
	for _, w := range ws {
		var first time.Time
		for _, req := range byWorker[w] {
			for _, a := range answers[req] {
				if a.At.After(promoted) && (first.IsZero() || a.At.Before(first)) {
					first = a.At
				}
			}
		}
		if first.IsZero() {
			c.NotRecovered(bound, fmt.Sprintf("worker %s stored no output on the new primary", short(w)))
			return
		}
		if first.After(last) {
			last = first
		}
	}
	c.Recovered(last.Sub(faultAt))
}

// logTime returns the time of the first line of a manager's JSON log that
// holds s.
func logTime(path, s string) (time.Time, bool) {
	f, err := os.Open(path)
	if err != nil {
		return time.Time{}, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if !strings.Contains(sc.Text(), s) {
			continue
		}
		var l struct {
			Time time.Time `json:"time"`
		}
		if json.Unmarshal(sc.Bytes(), &l) == nil && !l.Time.IsZero() {
			return l.Time, true
		}
	}
	return time.Time{}, false
}
