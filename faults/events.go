package faults

import (
	"bufio"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

// Creations follows the engine's create events for the case's containers
// (`docker events`, from the moment it was started), so that a case counts
// every container made, even one removed a second later: replacements,
// duplicates, a worker re-created without end.
type Creations struct {
	cmd *exec.Cmd
	mu  sync.Mutex
	evs []Created
}

// Created is one container the engine created.
type Created struct {
	At          time.Time
	ContainerID string
	WorkerID    string
}

// WatchCreations starts following creates; it stops when the case ends.
func (c *Case) WatchCreations() *Creations {
	c.T.Helper()
	since := time.Now()
	w := &Creations{}
	w.cmd = exec.Command("docker", "events", "--since", fmt.Sprintf("%d.%09d", since.Unix(), since.Nanosecond()),
		"--filter", "type=container", "--filter", "event=create",
		"--filter", "label="+protocol.LabelKeyPrefix+"="+c.Prefix,
		"--format", `{{.TimeNano}} {{.Actor.ID}} {{index .Actor.Attributes "`+protocol.LabelWorkerID+`"}}`)
	out, err := w.cmd.StdoutPipe()
	if err != nil {
		c.T.Fatal(err)
	}
	if err := w.cmd.Start(); err != nil {
		c.T.Fatalf("docker events: %v", err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) < 2 {
				continue
			}
			ns, _ := strconv.ParseInt(f[0], 10, 64)
			ev := Created{At: time.Unix(0, ns), ContainerID: f[1]}
			if len(f) > 2 {
				ev.WorkerID = f[2]
			} else {
				continue // a spare network namespace's holder (spawner/engine/docker/netns.go), not a worker
			}
			w.mu.Lock()
			w.evs = append(w.evs, ev)
			w.mu.Unlock()
		}
	}()
	c.OnFinish(func() { _ = w.cmd.Process.Kill(); _ = w.cmd.Wait() })
	return w
}

// Since returns the creates at or after t.
func (w *Creations) Since(t time.Time) []Created {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []Created
	for _, e := range w.evs {
		if !e.At.Before(t) {
			out = append(out, e)
		}
	}
	return out
}

// Workers returns the distinct worker ids of creates at or after t.
func (w *Creations) Workers(t time.Time) []string {
	seen := map[string]bool{}
	var out []string
	for _, e := range w.Since(t) {
		if !seen[e.WorkerID] {
			seen[e.WorkerID] = true
			out = append(out, e.WorkerID)
		}
	}
	return out
}
