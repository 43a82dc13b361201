package spawner

import (
	"context"
	"errors"
	"os"
	"sync"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/engine"
	"github.com/agentvisor/agentvisor/spawner/internal/rdb"
)

// A fleet is several hosts (Docker engines), each with its managers, on
// one Redis. A worker belongs to the host its create was admitted to
// (Keys.Placement); only a manager of that host touches its container.
// Creates are placed on the live host with the most free slots that
// matches the spec's placement; commands and control requests for a
// worker of another live host are forwarded to that host's own streams;
// a host whose managers stop renewing it for HostTTL is lost, and another
// host's manager retires its dead workers (HostWatch).

// errForwarded: the command went to the host that serves it, which
// replies; this manager neither replies nor executes it.
var errForwarded = errors.New("spawner: forwarded to the worker's host")

// Fleet is this host's view of the fleet: its own id, which hosts are
// live, which host a worker belongs to, and the one router that sends a
// request about a worker to the host that serves it.
type Fleet struct {
	e *env

	hostOnce sync.Once // resolves host, once
	hostID   string    // HOST_ID, may be empty
	info     func(ctx context.Context) (engine.Info, error)
	host     string // this manager's host id (Host)
}

// newFleet returns the fleet view of a manager whose host id is hostID
// (empty: the engine's name from info, else the machine's).
func newFleet(e *env, hostID string, info func(ctx context.Context) (engine.Info, error)) *Fleet {
	return &Fleet{e: e, hostID: hostID, info: info}
}

// Host returns this manager's host id: HOST_ID, else the engine's name,
// else the machine's.
func (f *Fleet) Host() string {
	f.hostOnce.Do(func() {
		f.host = f.hostID
		if f.host == "" && f.info != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if info, err := f.info(ctx); err == nil && protocol.ValidHostID(info.Name) {
				f.host = info.Name
			}
			cancel()
		}
		if f.host == "" {
			f.host, _ = os.Hostname()
		}
		if !protocol.ValidHostID(f.host) {
			f.host = "host"
		}
	})
	return f.host
}

// mine reports whether a worker placed on host (per the placement hash;
// "" for a worker with no placement record) is this host's.
func (f *Fleet) mine(host string) bool { return host == "" || host == f.Host() }

// live reports whether a host is live (this one always is).
func (f *Fleet) live(ctx context.Context, host string) (bool, error) {
	if host == f.Host() {
		return true, nil
	}
	until, err := f.e.rdb.HostLiveUntil(ctx, host)
	if err != nil {
		return false, err
	}
	return f.e.now().Before(until), nil
}

// candidates returns the hosts a create may be placed on, this host first
// (it wins a tie: no forwarding): the live hosts that match the spec's
// placement, or only this host when pinned (a create with no command to
// forward).
func (f *Fleet) candidates(ctx context.Context, p *protocol.Placement, pinned bool, maxWorkers int, labels map[string]string) ([]rdb.HostSlots, error) {
	me := f.Host()
	var out []rdb.HostSlots
	if p.Matches(me, labels) {
		out = append(out, rdb.HostSlots{Host: me, Max: maxWorkers})
	}
	if pinned {
		return out, nil
	}
	hosts, err := f.e.rdb.Hosts(ctx)
	if err != nil {
		return nil, err
	}
	now := f.e.now()
	for _, h := range hosts {
		if h.ID != me && h.Live(now) && h.MaxWorkers > 0 && p.Matches(h.ID, h.Labels) {
			out = append(out, rdb.HostSlots{Host: h.ID, Max: h.MaxWorkers})
		}
	}
	return out, nil
}

// A route is where a request about one worker is served.
type route struct {
	host string // the worker's host
	here bool   // this host: serve it here
	live bool   // the worker's host is live (always, here)
}

// elsewhere reports whether the request goes to another live host.
func (r route) elsewhere() bool { return !r.here && r.live }

// route finds the host that serves requests about a worker: the host it
// was placed on (this one for a worker with no placement record), and
// whether that host is live.
func (f *Fleet) route(ctx context.Context, id string) (route, error) {
	h, err := f.e.rdb.PlacementOf(ctx, id)
	if err != nil {
		return route{}, redisError(err, "placement of %s", id)
	}
	if f.mine(h) {
		return route{host: f.Host(), here: true, live: true}, nil
	}
	live, err := f.live(ctx, h)
	if err != nil {
		return route{}, redisError(err, "fleet hosts")
	}
	return route{host: h, live: live}, nil
}

// forward moves an entry of a shared stream (acknowledged there) to a
// host's own stream, where that host's managers serve it.
func (f *Fleet) forward(ctx context.Context, from, to, entryID string, data []byte) error {
	return f.e.rdb.Forward(ctx, from, to, protocol.ManagerGroup, entryID, data)
}

// forwardCreate puts a create command for the worker a create placed on
// another host (a replacement: no command entry to move) on that host's
// command stream.
func (f *Fleet) forwardCreate(ctx context.Context, host, commandID string, spec protocol.WorkerSpec) error {
	doc, err := protocol.Command{ID: commandID, Action: protocol.ActionCreate, Spec: &spec, Timestamp: f.e.now()}.Encode()
	if err != nil {
		return &Error{Code: protocol.CodeInternalError, Err: err}
	}
	if err := f.e.rdb.AddEntry(ctx, f.e.keys.HostCommands(host), doc); err != nil {
		return redisError(err, "forward a create to %s", host)
	}
	return nil
}
