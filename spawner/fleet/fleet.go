// Package fleet is one host's view of a fleet: several hosts (Docker
// engines), each with its managers, on one Redis. A worker belongs to the
// host its create was admitted to (Keys.Placement); only a manager of
// that host touches its instance. Creates are placed on the live host
// with the most free slots that matches the spec's placement; commands
// and control requests about a worker of another live host go to that
// host's own streams. View owns this host's id, which hosts are live,
// and the one router; the spawner's HostPresence renews this host and its
// HostWatch retires a lost host's workers.
package fleet

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/engine"
	"github.com/agentvisor/agentvisor/spawner/internal/rdb"
)

// Store is what the view reads and writes: the host registry and the
// streams requests are moved to.
type Store interface {
	HostLiveUntil(ctx context.Context, host string) (time.Time, error)
	Hosts(ctx context.Context) ([]rdb.HostInfo, error)
	PlacementOf(ctx context.Context, id string) (string, error)
	Forward(ctx context.Context, from, to, group, entryID string, data []byte) error
	AddEntry(ctx context.Context, stream string, doc []byte) error
}

// View is this host's view of the fleet.
type View struct {
	store Store
	keys  protocol.Keys
	now   func() time.Time

	hostOnce sync.Once // resolves host, once
	hostID   string    // HOST_ID, may be empty
	info     func(ctx context.Context) (engine.Info, error)
	host     string // this manager's host id (Host)
}

// New returns the view of a manager whose host id is hostID (empty: the
// engine's name from info, else the machine's). now is the clock a
// host's liveness is read against.
func New(store Store, keys protocol.Keys, now func() time.Time, hostID string, info func(ctx context.Context) (engine.Info, error)) *View {
	return &View{store: store, keys: keys, now: now, hostID: hostID, info: info}
}

// Host returns this manager's host id: HOST_ID, else the engine's name,
// else the machine's.
func (v *View) Host() string {
	v.hostOnce.Do(func() {
		v.host = v.hostID
		if v.host == "" && v.info != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if info, err := v.info(ctx); err == nil && protocol.ValidHostID(info.Name) {
				v.host = info.Name
			}
			cancel()
		}
		if v.host == "" {
			v.host, _ = os.Hostname()
		}
		if !protocol.ValidHostID(v.host) {
			v.host = "host"
		}
	})
	return v.host
}

// Mine reports whether a worker placed on host (per the placement hash;
// "" for a worker with no placement record) is this host's.
func (v *View) Mine(host string) bool { return host == "" || host == v.Host() }

// Live reports whether a host is live (this one always is).
func (v *View) Live(ctx context.Context, host string) (bool, error) {
	if host == v.Host() {
		return true, nil
	}
	until, err := v.store.HostLiveUntil(ctx, host)
	if err != nil {
		return false, err
	}
	return v.now().Before(until), nil
}

// Candidates returns the hosts a create may be placed on, this host first
// (it wins a tie: no forwarding): the live hosts that match the spec's
// placement, or only this host when pinned (a create with no command to
// forward). maxWorkers and labels are this host's.
func (v *View) Candidates(ctx context.Context, p *protocol.Placement, pinned bool, maxWorkers int, labels map[string]string) ([]rdb.HostSlots, error) {
	me := v.Host()
	var out []rdb.HostSlots
	if p.Matches(me, labels) {
		out = append(out, rdb.HostSlots{Host: me, Max: maxWorkers})
	}
	if pinned {
		return out, nil
	}
	hosts, err := v.store.Hosts(ctx)
	if err != nil {
		return nil, err
	}
	now := v.now()
	for _, h := range hosts {
		if h.ID != me && h.Live(now) && h.MaxWorkers > 0 && p.Matches(h.ID, h.Labels) {
			out = append(out, rdb.HostSlots{Host: h.ID, Max: h.MaxWorkers})
		}
	}
	return out, nil
}

// A Route is where a request about one worker is served.
type Route struct {
	Host string // the worker's host
	Here bool   // this host: serve it here
	Live bool   // the worker's host is live (always, here)
}

// Elsewhere reports whether the request goes to another live host.
func (r Route) Elsewhere() bool { return !r.Here && r.Live }

// Route finds the host that serves requests about a worker: the host it
// was placed on (this one for a worker with no placement record), and
// whether that host is live. Its errors are Redis's.
func (v *View) Route(ctx context.Context, id string) (Route, error) {
	h, err := v.store.PlacementOf(ctx, id)
	if err != nil {
		return Route{}, fmt.Errorf("placement of %s: %w", id, err)
	}
	if v.Mine(h) {
		return Route{Host: v.Host(), Here: true, Live: true}, nil
	}
	live, err := v.Live(ctx, h)
	if err != nil {
		return Route{}, fmt.Errorf("fleet hosts: %w", err)
	}
	return Route{Host: h, Live: live}, nil
}

// Forward moves an entry of a shared stream (acknowledged there) to a
// host's own stream, where that host's managers serve it.
func (v *View) Forward(ctx context.Context, from, to, entryID string, data []byte) error {
	return v.store.Forward(ctx, from, to, protocol.ManagerGroup, entryID, data)
}

// SendCommand puts an encoded command on a host's command stream (a
// create placed there with no command entry to move: a replacement).
func (v *View) SendCommand(ctx context.Context, host string, doc []byte) error {
	return v.store.AddEntry(ctx, v.keys.HostCommands(host), doc)
}
