package main

import (
	"context"
	"fmt"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

// egress has the sealed Claude worker's agent reach a host its allowlist
// does not name (it names the private git host alone): the gateway
// refuses the connection before any name is resolved, and the task's
// consumer sees the refusal as a warning.
func (d *demo) egress(ctx context.Context, id string) error {
	d.tl.section("a sealed worker's egress: a host off its allowlist is refused, the consumer is told")
	sent, err := d.put(ctx, id, projectShop, "shop-egress", promptEgress, scriptEgress)
	if err != nil {
		return err
	}
	if _, err := d.await(ctx, sent, protocol.StatusComplete, nil); err != nil {
		return err
	}
	msgs, err := d.rdb.XRange(ctx, d.keys.Output(id), "-", "+").Result()
	if err != nil {
		return err
	}
	for _, m := range msgs {
		data, _ := protocol.EntryData(m.Values)
		if p, err := protocol.DecodeProgress(data); err == nil && p.RequestID == sent.RequestID && p.Refused != nil && p.Refused.Tool == "network" {
			d.tl.say("refused: %s:%d is not on %s's egress allowlist (a warning on its output; the gateway resolved nothing)", p.Refused.Host, p.Refused.Port, d.tl.name(id))
			return d.tl.waitEvent(ctx, id, protocol.EventPaused, 30*time.Second)
		}
	}
	if d.stub == nil {
		d.tl.say("the model did not try the host: no refusal to show")
		return d.tl.waitEvent(ctx, id, protocol.EventPaused, 30*time.Second)
	}
	return fmt.Errorf("task shop-egress: no refused-connection warning on %s's output", d.tl.name(id))
}
