package fleet

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/internal/rdb"
)

// fakeStore is a fleet of hosts as the registry says it is.
type fakeStore struct {
	Store
	until     map[string]time.Time // host -> live until
	placement map[string]string    // worker -> host
	hosts     []rdb.HostInfo
	down      bool
}

func (f *fakeStore) HostLiveUntil(_ context.Context, host string) (time.Time, error) {
	return f.until[host], nil
}

func (f *fakeStore) PlacementOf(_ context.Context, id string) (string, error) {
	if f.down {
		return "", errors.New("connection refused")
	}
	return f.placement[id], nil
}

func (f *fakeStore) Hosts(context.Context) ([]rdb.HostInfo, error) { return f.hosts, nil }

var now = time.UnixMilli(1_800_000_000_000)

func TestRouteByPlacement(t *testing.T) {
	st := &fakeStore{until: map[string]time.Time{"b": now.Add(time.Minute), "c": now.Add(-time.Second)},
		placement: map[string]string{"w-a": "a", "w-b": "b", "w-c": "c"}}
	v := New(st, protocol.Keys{Prefix: "t"}, func() time.Time { return now }, "a", nil)
	for id, want := range map[string]Route{
		"w-a":    {Host: "a", Here: true, Live: true},
		"w-none": {Host: "a", Here: true, Live: true}, // no placement record: this host's
		"w-b":    {Host: "b", Live: true},
		"w-c":    {Host: "c"}, // its host stopped renewing: lost
	} {
		got, err := v.Route(context.Background(), id)
		if err != nil || got != want {
			t.Errorf("route %s = %+v, %v; want %+v", id, got, err, want)
		}
	}
	if r, _ := v.Route(context.Background(), "w-b"); !r.Elsewhere() {
		t.Errorf("a worker of a live other host is served elsewhere")
	}
	st.down = true
	if _, err := v.Route(context.Background(), "w-b"); err == nil {
		t.Errorf("route with Redis down: no error")
	}
}

func TestCandidatesAreLiveMatchingHostsThisOneFirst(t *testing.T) {
	st := &fakeStore{hosts: []rdb.HostInfo{
		{ID: "a", MaxWorkers: 9, LiveUntil: now.Add(time.Minute)},
		{ID: "b", MaxWorkers: 4, LiveUntil: now.Add(time.Minute), Labels: map[string]string{"gpu": "yes"}},
		{ID: "c", MaxWorkers: 4, LiveUntil: now.Add(-time.Second), Labels: map[string]string{"gpu": "yes"}},
		{ID: "d", MaxWorkers: 0, LiveUntil: now.Add(time.Minute), Labels: map[string]string{"gpu": "yes"}},
	}}
	v := New(st, protocol.Keys{Prefix: "t"}, func() time.Time { return now }, "a", nil)
	got, err := v.Candidates(context.Background(), &protocol.Placement{}, false, 3, nil)
	if err != nil || len(got) != 2 || got[0] != (rdb.HostSlots{Host: "a", Max: 3}) || got[1].Host != "b" {
		t.Fatalf("any host: %+v, %v; want a (this one, its own max) then b", got, err)
	}
	got, _ = v.Candidates(context.Background(), &protocol.Placement{}, true, 3, nil)
	if len(got) != 1 || got[0].Host != "a" {
		t.Fatalf("pinned: %+v; want this host alone", got)
	}
	gpu := &protocol.Placement{Labels: map[string]string{"gpu": "yes"}}
	got, _ = v.Candidates(context.Background(), gpu, false, 3, nil)
	if len(got) != 1 || got[0].Host != "b" {
		t.Fatalf("gpu: %+v; want b alone (c is lost, d takes no workers, a lacks the label)", got)
	}
}
