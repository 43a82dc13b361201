package main

import (
	"context"
	"fmt"
	"strings"
)

// spread creates the workers at once and shows where they were placed.
func (r *run) spread(ctx context.Context) ([]string, map[string][]string, error) {
	r.tl.section(fmt.Sprintf("%d creates on %d hosts of %d slots each: placed on the host with the most free slots", r.workers, r.hosts, r.perHost))
	ids, err := r.req.createMany(ctx, r.workers)
	if err != nil {
		return nil, nil, err
	}
	perHost := map[string][]string{}
	for _, id := range ids {
		h := r.hostOf(ctx, id)
		perHost[h] = append(perHost[h], id)
		r.tl.nameWorker(id, h)
	}
	var counts []string
	for _, h := range r.fleet.Hosts {
		var names []string
		for _, id := range perHost[h.ID] {
			names = append(names, r.tl.name(id))
		}
		counts = append(counts, fmt.Sprintf("%s %d", h.ID, len(perHost[h.ID])))
		r.tl.say("%s runs %d workers: %s", h.ID, len(perHost[h.ID]), strings.Join(names, " "))
	}
	r.tl.say("spread: %s", strings.Join(counts, ", "))
	return ids, perHost, nil
}
