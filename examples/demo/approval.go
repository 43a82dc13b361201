package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

// approval gives the Claude worker a task whose command ALLOWED_COMMANDS
// does not allow: the worker asks (a permission_request on its output),
// the demo allows it (a permission_reply on its input), the command runs.
func (d *demo) approval(ctx context.Context, id string) error {
	d.tl.section("an approval: a command outside ALLOWED_COMMANDS is asked of the task's owner")
	sent, err := d.put(ctx, id, projectShop, "shop-3", promptApprove, scriptApprove)
	if err != nil {
		return err
	}
	asked := 0
	_, err = d.await(ctx, sent, protocol.StatusComplete, func(p protocol.PermissionRequest) error {
		asked++
		d.tl.say("%-8s permission_request %s: may the agent run %s %s? (denied after %v without an answer)", d.tl.name(id), p.PermissionID, p.Tool, compact(p.Input),
			time.Duration(p.TimeoutMS)*time.Millisecond)
		d.tl.say("permission_reply → %s: allow %s", sent.Input, p.PermissionID)
		return d.tasks.Answer(ctx, sent, p.PermissionID, true, "")
	})
	if err != nil {
		return err
	}
	if asked == 0 {
		return fmt.Errorf("task %s: the worker asked no permission for a command outside its ALLOWED_COMMANDS", sent.RequestID)
	}
	if d.stub != nil {
		if !strings.Contains(d.lastModelText(), "?? approved.txt") {
			return fmt.Errorf("task %s: the allowed command did not run (git status does not show approved.txt)", sent.RequestID)
		}
		d.tl.say("the allowed touch ran: git status shows approved.txt")
	}
	return d.tl.waitEvent(ctx, id, protocol.EventPaused, 30*time.Second)
}
