package main

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	dockerclient "github.com/docker/docker/client"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner"
)

// hibernation hibernates the idle Claude worker (its container goes, its
// slot and memory are given back; its id, streams and session stay) and
// wakes it with a task that continues the session.
func (d *demo) hibernation(ctx context.Context, id, session string) error {
	d.tl.section("hibernation: the worker gives back its container, keeps its id and session")
	r, err := d.cli.Do(ctx, protocol.Command{Action: protocol.ActionHibernate, WorkerID: id})
	if err != nil {
		return err
	}
	n, err := containersOf(ctx, id)
	if err != nil {
		return err
	}
	if r.Worker == nil || r.Worker.Status != protocol.ContainerHibernated || n != 0 {
		return fmt.Errorf("hibernate %s: status %+v, %d containers left", d.tl.name(id), r.Worker, n)
	}
	d.tl.say("command hibernate: %s is %s (0 containers; its slot and memory are free)", d.tl.name(id), r.Worker.Status)
	start := time.Now()
	o, err := d.send(ctx, id, projectShop, "shop-4", promptRecall, scriptRecall)
	if err != nil {
		return err
	}
	if o.SessionID != session || o.Session == nil || o.Session.Action != protocol.SessionResume {
		return fmt.Errorf("task shop-4 after the wake did not resume session %s: session %s %+v", session, o.SessionID, o.Session)
	}
	st, err := d.cli.Do(ctx, protocol.Command{Action: protocol.ActionStatus, WorkerID: id})
	if err != nil {
		return err
	}
	d.tl.say("task shop-4 woke %s (incarnation %d, %s from the task to its answer) and resumed session %s", d.tl.name(id), st.Worker.Incarnation,
		time.Since(start).Round(10*time.Millisecond), short(o.SessionID))
	if d.stub != nil {
		if !strings.Contains(d.lastModelText(), "add a file hello.txt") {
			return fmt.Errorf("task shop-4: the woken worker's session did not carry the first task's turns to the model")
		}
		d.tl.say("the model got the first task's turns: the session outlived the container")
	}
	return d.tl.waitEvent(ctx, id, protocol.EventPaused, 30*time.Second)
}

// containersOf counts the containers of a worker on the engine, found by
// name: a container adopted from a warm pool keeps the label of the
// worker it was made for.
func containersOf(ctx context.Context, id string) (int, error) {
	dc, err := dockerclient.NewClientWithOpts(dockerclient.FromEnv, dockerclient.WithAPIVersionNegotiation())
	if err != nil {
		return 0, err
	}
	defer dc.Close()
	name := "^/" + regexp.QuoteMeta(spawner.ContainerName(id)) + "$"
	cs, err := dc.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("name", name))})
	return len(cs), err
}
