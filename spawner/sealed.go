package spawner

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/agentvisor/agentvisor/gateway"
	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/engine"
)

// Sealed workers (WORKER_NETWORK_MODE=sealed) have no network of their
// own: their container is on Docker's `none` network (loopback only), and
// what they may reach comes through unix sockets in a directory of the
// host's gateway (worker-gateway, a process of its own beside the engine)
// that is mounted into the container read-only. One directory per worker,
// so the gateway knows who calls without a secret in the container:
//
//   - redis.sock relays to the fleet's Redis, where the wrapper logs in as
//     the worker's own ACL user (REDIS_SOCKET);
//   - model.sock takes the wrapper's proxy's model calls (plain HTTP) and
//     forwards them to the model API over HTTPS (MODEL_SOCKET); the proxy
//     stays the agent's only way to the model.
//
// The agent can call both sockets itself: neither gives it more than it
// has. Redis wants the worker user's password, and model.sock the
// worker's token (made at create, given to the gateway and to the
// wrapper as MODEL_SOCKET_TOKEN), both of which only the wrapper holds:
// with a model key of its own, the agent still reaches no model API
// through model.sock, unmetered and unbudgeted.
const sealedMount = "/run/agentvisor"

// Gateway is what the spawner asks of its host's gateway: a worker's
// socket directory opened (or its allowlist replaced) before its container
// is made, and closed (its connections cut) when it is retired.
type Gateway interface {
	OpenSpec(ctx context.Context, spec gateway.WorkerSpec) (gateway.WorkerInfo, error)
	Close(ctx context.Context, id string) error
	Rename(ctx context.Context, from, to string) (gateway.WorkerInfo, error)
}

// sealing is this host's gateway as the spawner uses it: the socket
// directory of each sealed worker opened, renamed and closed, and the
// directory mounted into the worker's instance.
type sealing struct {
	cfg *Config // WORKER_NETWORK_MODE, GATEWAY_DIR
	gw  Gateway // nil when not sealed (or, in tests, no gateway)
	log *slog.Logger
}

// enabled reports whether workers are sealed.
func (g *sealing) enabled() bool { return g.cfg.NetworkMode == NetworkSealed }

// served reports whether sealed workers have a gateway to hand over.
func (g *sealing) served() bool { return g.enabled() && g.gw != nil }

// NetworkSealed is WORKER_NETWORK_MODE's value for sealed workers.
const NetworkSealed = "sealed"

// openSealed opens a worker's socket directory at the gateway, with its
// egress allowlist, its project (which scopes the credentials the
// gateway adds) and its model token ("": the one the gateway has stays);
// opening again replaces them. It returns the hosts the gateway has a
// credential for, for this worker.
func (g *sealing) open(ctx context.Context, id string, spec protocol.WorkerSpec, modelToken string) ([]string, error) {
	if !g.enabled() {
		return nil, nil
	}
	if g.gw == nil {
		return nil, errorf(protocol.CodeInternalError, "WORKER_NETWORK_MODE=sealed without a gateway")
	}
	gs := gateway.WorkerSpec{WorkerID: id, ProjectID: spec.ProjectID, ModelToken: modelToken}
	if spec.Network != nil {
		gs.Allow = spec.Network.Allow
	}
	info, err := g.gw.OpenSpec(ctx, gs)
	if err != nil {
		return nil, errorf(protocol.CodeUpstreamUnavailable, "the sealed network's gateway (worker-gateway, GATEWAY_DIR=%s): %v", g.cfg.GatewayDir, err)
	}
	return info.CredentialHosts, nil
}

// closeSealed closes a retired worker's socket directory; a gateway that
// does not answer is logged (its reconciliation closes what is left).
func (g *sealing) close(ctx context.Context, id string) {
	if !g.served() {
		return
	}
	if err := g.gw.Close(ctx, id); err != nil {
		g.log.Warn("the gateway did not close a retired worker's sockets", "worker_id", id, "err", err)
	}
}

// newModelToken makes a sealed worker's model token: 32 random bytes in
// hex, with a prefix that says what it is when it turns up somewhere.
func newModelToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return "agentvisor-worker-" + hex.EncodeToString(b)
}

// mount gives a sealed worker's instance no network but loopback and its
// socket directory, and tells the wrapper where its sockets are, its model
// token, and which hosts the gateway adds a credential for (the wrapper
// points git at them over http://, through the gateway).
func (g *sealing) mount(id string, is *engine.Spec, o *createOpts) {
	is.Network = engine.Sealed
	is.Mounts = append(is.Mounts, engine.Mount{HostPath: filepath.Join(g.cfg.GatewayDir, id), Target: sealedMount, ReadOnly: true})
	is.Env = append(is.Env, "REDIS_SOCKET="+sealedMount+"/"+gateway.RedisSocket, "MODEL_SOCKET="+sealedMount+"/"+gateway.ModelSocket,
		"EGRESS_SOCKET="+sealedMount+"/"+gateway.EgressSocket, "MODEL_SOCKET_TOKEN="+o.modelToken)
	if len(o.credentialHosts) > 0 {
		is.Env = append(is.Env, "CREDENTIAL_HOSTS="+strings.Join(o.credentialHosts, ","))
	}
}

// SetNetwork replaces a sealed worker's egress allowlist: the gateway
// applies it to the worker's new connections at once, and the status
// hash's spec keeps it (a replacement gets it, Status shows it).
func (s *Spawner) SetNetwork(ctx context.Context, id string, network protocol.Network) (protocol.WorkerInfo, error) {
	if !s.seals.enabled() {
		return protocol.WorkerInfo{}, errorf(protocol.CodeInvalidCommand, "set_network: workers here are not sealed (WORKER_NETWORK_MODE=%s)", s.cfg.NetworkMode)
	}
	if _, err := protocol.ParseEgressRules(network.Allow); err != nil {
		return protocol.WorkerInfo{}, errorf(protocol.CodeInvalidCommand, "set_network: network.allow: %v", err)
	}
	h, err := s.rdb.Status(ctx, id)
	if err != nil {
		return protocol.WorkerInfo{}, redisError(err, "status of %s", id)
	}
	var spec protocol.WorkerSpec
	if member, err := s.rdb.IsWorker(ctx, id); err != nil {
		return protocol.WorkerInfo{}, redisError(err, "workers set")
	} else if !member || json.Unmarshal([]byte(h[protocol.StatusFieldSpec]), &spec) != nil {
		return protocol.WorkerInfo{}, errorf(protocol.CodeNotFound, "worker %s", id)
	}
	spec.Network = &network
	if _, err := s.seals.open(ctx, id, spec, ""); err != nil {
		return protocol.WorkerInfo{}, err
	}
	s.writeStatus(ctx, id, map[string]any{protocol.StatusFieldSpec: specJSON(spec)})
	s.lifecycle(ctx, id, protocol.EventNetworkChanged, map[string]any{"allow": network.Allow})
	return s.Status(ctx, id)
}
