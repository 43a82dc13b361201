package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/agentvisor/agentvisor/client"
	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/stubmodel"
)

// How every stage of the demo uses the runtime: a create through the
// worker-managers, a task put on a worker's input and followed to its
// output, and with the stub what the model was sent.

// create asks the manager for a worker and registers its display name.
func (d *demo) create(ctx context.Context, name string, spec protocol.WorkerSpec) (string, error) {
	caps := make([]string, len(spec.Capabilities))
	for i, c := range spec.Capabilities {
		caps[i] = string(c)
	}
	d.tl.say("command create: %s worker, project %s, capabilities [%s]", spec.AgentType, spec.ProjectID, strings.Join(caps, " "))
	t0 := time.Now()
	reply, err := d.cli.Do(ctx, protocol.Command{Action: protocol.ActionCreate, Spec: &spec})
	if err != nil {
		return "", fmt.Errorf("create %s: %w (manager log: %s)", name, err, d.logPath())
	}
	w := reply.Worker
	if w == nil {
		return "", fmt.Errorf("create %s: the reply names no worker", name)
	}
	d.tl.register(w.WorkerID, name)
	if d.rdb.HGet(ctx, d.keys.Status(w.WorkerID), protocol.StatusFieldPoolState).Val() == protocol.PoolAllocated {
		took := time.Since(t0)
		// What the worker did in the pool (its paused event) is behind us:
		// the timeline of this worker starts at its allocation.
		if err := d.tl.waitEvent(ctx, w.WorkerID, protocol.EventAllocated, 30*time.Second); err != nil {
			return "", err
		}
		d.tl.say("reply: %s = worker %s from the warm pool (%.0f ms: an unpause, no container made); the pool makes another", name, w.WorkerID, float64(took.Microseconds())/1000)
		return w.WorkerID, nil
	}
	d.tl.say("reply: %s = worker %s, image %s (%.1fs; a missing image is built first)", name, w.WorkerID, w.Image, time.Since(t0).Seconds())
	return w.WorkerID, nil
}

// send puts a task on the worker's input stream and waits for its
// output, which must be complete.
func (d *demo) send(ctx context.Context, id, project, requestID, prompt string, script stubmodel.Script) (protocol.Output, error) {
	sent, err := d.put(ctx, id, project, requestID, prompt, script)
	if err != nil {
		return protocol.Output{}, err
	}
	return d.await(ctx, sent, protocol.StatusComplete, nil)
}

// put puts a task on the worker's input stream.
func (d *demo) put(ctx context.Context, id, project, requestID, prompt string, script stubmodel.Script) (client.Sent, error) {
	return d.putTask(ctx, id, protocol.Task{RequestID: requestID, ProjectID: project, Prompt: prompt}, script)
}

// putTask puts task on the worker's input stream, its request id made
// this run's.
func (d *demo) putTask(ctx context.Context, id string, task protocol.Task, script stubmodel.Script) (client.Sent, error) {
	if d.stub != nil {
		d.stub.SetScript(script)
	}
	// Request ids are unique per request: a run's status outlives it.
	task.RequestID += "-" + d.runID
	task.TimeoutSeconds = 240
	requestID, prompt := task.RequestID, task.Prompt
	sent, err := d.tasks.Send(ctx, id, task)
	if err != nil {
		return sent, err
	}
	short := prompt
	if len(short) > 70 {
		short = short[:67] + "..."
	}
	d.tl.say("task %s → %s: %q", requestID, sent.Input, short)
	return sent, nil
}

// await waits for the task's output, which must have status want; each
// permission request of the task goes to answer (nil: none expected).
// The timeline shows the progress and the output as the watcher
// reads them.
func (d *demo) await(ctx context.Context, sent client.Sent, want protocol.OutputStatus, answer func(protocol.PermissionRequest) error) (protocol.Output, error) {
	wctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	var (
		o         protocol.Output
		answerErr error
	)
	err := d.tasks.Watch(wctx, sent, func(ev client.Event) {
		switch {
		case ev.Output != nil:
			o = *ev.Output
		case ev.Permission != nil && answer == nil:
			answerErr = fmt.Errorf("task %s asked for a permission nobody answers: %s", sent.RequestID, ev.Data)
		case ev.Permission != nil && answerErr == nil:
			answerErr = answer(*ev.Permission)
		}
	})
	switch {
	case errors.Is(err, client.ErrAwaitTimeout):
		return o, fmt.Errorf("no output for task %s within 4 min (manager log: %s)", sent.RequestID, d.logPath())
	case err != nil:
		return o, err
	case answerErr != nil:
		return o, answerErr
	case o.Status != want:
		return o, fmt.Errorf("task %s ended %s, not %s: %+v\nthe worker's log, its end:\n%s", sent.RequestID, o.Status, want, o.Error, workerLog(o.WorkerID))
	}
	return o, nil
}

// workerLog is the end of a worker's container log (its wrapper's), read
// before the manager's shutdown takes the container away: what a failed
// task's output does not say.
func workerLog(workerID string) string {
	ids, err := exec.Command("docker", "ps", "-aq", "--filter", "label="+protocol.LabelWorkerID+"="+workerID).Output()
	if err != nil || len(bytes.Fields(ids)) == 0 {
		return fmt.Sprintf("(no container of worker %s: %v)", workerID, err)
	}
	out, _ := exec.Command("docker", "logs", "--tail", "60", string(bytes.Fields(ids)[0])).CombinedOutput()
	return string(out)
}

// checkToolResult makes sure, with the stub, that the agent's shell tool
// reached the wrapper's progress endpoint: the tool result the model got
// back says so.
func (d *demo) checkToolResult(requestID string) error {
	if d.stub == nil {
		return nil
	}
	reqs := d.stub.Requests()
	if len(reqs) == 0 {
		return fmt.Errorf("task %s: the stub model got no request", requestID)
	}
	if text := reqs[len(reqs)-1].Text(); !strings.Contains(text, "progress recorded") {
		return fmt.Errorf("task %s: the shell tool did not report progress; the model got back: ...%s", requestID, text[max(0, len(text)-600):])
	}
	return nil
}

// lastModelText is the text of the last request the stub model got ("" when
// it got none): what the agent sent it, tool results included.
func (d *demo) lastModelText() string {
	reqs := d.stub.Requests()
	if len(reqs) == 0 {
		return ""
	}
	return reqs[len(reqs)-1].Text()
}
