package faults

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// hooks are what a case's test asks to run when the case ends (finish):
// stops and afters in the reverse order of their registration, counts in
// order. Case embeds them: a test calls c.OnFinish and the rest.
type hooks struct {
	mu     sync.Mutex
	stops  []func() // run before the final shutdown
	counts []func() // run after it, before the containers left are counted
	afters []func() // run at the very end (what the managers need until they stop)
}

// OnFinish runs f when the case ends, before the final shutdown.
func (h *hooks) OnFinish(f func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stops = append(h.stops, f)
}

// BeforeCount runs f when the case ends, after the final shutdown and
// before the containers left are counted.
func (h *hooks) BeforeCount(f func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.counts = append(h.counts, f)
}

// AfterFinish runs f when the case ends, after the final shutdown and the
// count of what was left.
func (h *hooks) AfterFinish(f func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.afters = append(h.afters, f)
}

// registered returns the hooks registered so far.
func (h *hooks) registered() (stops, counts, afters []func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stops, h.counts, h.afters
}

// finish is the case's end: the final shutdown of its managers, orphans
// counted and removed, the row recorded, and the verdict.
func (c *Case) finish() {
	t := c.T
	stops, _, afters := c.registered()
	defer func() {
		for i := len(afters) - 1; i >= 0; i-- {
			afters[i]()
		}
		// Cleanup only: a container the engine made after the count (a
		// call it finished for a manager long gone) is removed too.
		for _, x := range c.Containers() {
			t.Logf("removing container %s (%s), made after the count", short(x.ID), x.State)
			c.RemoveContainer(x)
		}
	}()
	for i := len(stops) - 1; i >= 0; i-- {
		stops[i]()
	}
	if c.Sentinel == nil && !c.Redis.Running() {
		if err := c.Redis.Start(); err != nil {
			t.Errorf("restart redis for the final count: %v", err)
		}
	}
	if g := c.Gateway(); g != nil && !g.Running() {
		if _, err := c.restartGateway(); err != nil {
			t.Errorf("restart the gateway for the final shutdown: %v", err)
		}
	}
	settled := c.settle(c.answers())
	managers := c.shutDown()
	left := c.orphans()
	tally := c.L.Tally(settled, c.answers())
	row, notes := c.row(c.Opt, c.begun, tally, left)
	failures, notes := c.verdict(row, tally, notes, c.Opt.ExtraAnswers, t.Failed())
	row.Pass = len(failures) == 0 && !t.Failed()
	row.Notes = strings.Join(notes, "; ")
	record(row)
	for _, n := range tally.Notes {
		t.Log(n)
	}
	if len(failures) > 0 {
		t.Errorf("%s: %s of %d requests (goal 0 lost, 0 duplicated, 0 orphans, recovery within the bound)",
			c.Opt.Name, strings.Join(failures, ", "), row.Tasks)
	}
	if !row.Pass || os.Getenv("FAULTS_DEBUG") != "" {
		for _, m := range managers {
			t.Logf("manager %s (pid %d), last lines of its log:\n%s", m.ID, m.Pid(), m.LogTail(logLines()))
		}
		if g := c.Gateway(); g != nil {
			t.Logf("worker-gateway (pid %d), last lines of its log:\n%s", g.Pid(), g.LogTail(logLines()))
		}
	}
	c.RC.Close()
}

// shutDown is the final shutdown of the case's managers, as a supervisor
// does it: SIGTERM, then SIGKILL past the stop timeout and a margin (a
// wrapper's shutdown grace is 10 s shorter than the stop timeout, so every
// worker is gone by then). It returns the managers.
func (c *Case) shutDown() []*Manager {
	c.mu.Lock()
	managers := append([]*Manager(nil), c.managers...)
	c.mu.Unlock()
	bound := StopTimeout + 5*time.Second
	for _, m := range managers {
		if !m.Running() {
			continue
		}
		if exited, took := m.Terminate(bound); !exited {
			c.Note("final shutdown: manager %s did not exit within %s of SIGTERM (SIGKILLed)", m.ID, roundDur(took))
		}
	}
	return managers
}

// orphans runs the case's own counts, then removes and returns the
// containers left after the final shutdown.
func (c *Case) orphans() []Container {
	_, counts, _ := c.registered()
	for _, f := range counts {
		f()
	}
	left := c.Containers()
	if len(left) > 0 {
		var states []string
		for _, x := range left {
			states = append(states, short(x.WorkerID)+" "+x.State+hostNote(x.Host))
			c.RemoveContainer(x)
		}
		c.Note("%d containers left after the final shutdown (%s)", len(left), strings.Join(states, ", "))
	}
	return left
}

// logLines is how many last lines of each process's log a failed case
// prints: FAULTS_LOG_LINES, default 20.
func logLines() int {
	if n, err := strconv.Atoi(os.Getenv("FAULTS_LOG_LINES")); err == nil && n > 0 {
		return n
	}
	return 20
}
