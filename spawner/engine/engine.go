// Package engine is the seam between the spawner and what runs worker
// instances. An instance is one incarnation of a worker: the
// worker-wrapper as PID 1 of a container (Docker) or of a pod
// (Kubernetes), with its limits, labels and storage. The spawner decides
// what runs, where and why, and keeps its truth in Redis and in the
// instances' labels; an Engine only carries out those decisions, in the
// runtime's words (create, start, suspend, resume, stop, remove, inspect,
// list, watch), so that a second engine is one more implementation and
// nothing above it changes.
//
// Errors an engine returns wrap one of the sentinel errors below where a
// caller must branch (errors.Is), never a text to match.
package engine

import (
	"context"
	"errors"
	"time"
)

// Engine runs the instances of one host (a Docker engine) or one cluster.
// Every call takes a context that bounds it; a call on an instance that
// does not exist returns ErrNotFound.
type Engine interface {
	// Create makes an instance from spec without starting it and returns
	// its id. A name already in use returns ErrConflict (the same create
	// delivered twice finds the first one by Inspect); an image the engine
	// does not have returns ErrNotFound.
	Create(ctx context.Context, spec Spec) (string, error)
	// Start starts a created instance and returns its id, which differs
	// from the one given when the engine had to make the instance again
	// (Docker: a spare network namespace that went before the start).
	Start(ctx context.Context, id string) (string, error)
	// Suspend freezes an instance's processes, memory kept; Resume thaws
	// them. Suspending a suspended instance, or resuming one that is not,
	// is ErrConflict (the caller inspects it to tell). An engine that
	// cannot freeze (Suspends false) returns ErrUnsupported from Suspend,
	// and nil from Resume for an instance that exists: it runs.
	Suspend(ctx context.Context, id string) error
	Resume(ctx context.Context, id string) error
	// Suspends reports whether Suspend freezes instances. Where it does
	// not, the spawner's pause hibernates a worker that can hibernate and
	// leaves the others running idle.
	Suspends() bool
	// RunsContainers reports whether an instance may run containers of
	// its own (Spec.Containers, the DOCKER capability). Where it does not,
	// the spawner refuses such a create before it builds anything.
	RunsContainers() bool
	// Stop asks the wrapper to finish (SIGTERM) and kills it after grace.
	Stop(ctx context.Context, id string, grace time.Duration) error
	// Remove kills and removes an instance (ErrNotFound: already gone).
	Remove(ctx context.Context, id string) error
	// Rename gives an instance to another worker: the instance a warm pool
	// made becomes the woken worker's.
	Rename(ctx context.Context, id, worker string) error
	// Inspect returns an instance, by its id or by the worker it serves
	// (InstanceName).
	Inspect(ctx context.Context, ref string) (Instance, error)
	// List returns the instances of this key prefix on this engine.
	List(ctx context.Context, f Filter) ([]Instance, error)
	// Watch streams the events of this key prefix's instances from since
	// until ctx ends; the error channel says the stream broke (the caller
	// lists what it missed and watches again).
	Watch(ctx context.Context, since time.Time) (<-chan Event, <-chan error)

	// Volumes lists the project volumes of this key prefix;
	// RemoveVolume removes one (one gone is no error; one in use is,
	// unless force, which the operator's clean-up of a prefix uses).
	Volumes(ctx context.Context) ([]Volume, error)
	RemoveVolume(ctx context.Context, name string, force bool) error

	// Info describes the engine's capacity.
	Info(ctx context.Context) (Info, error)

	// Prepare starts making what the engine keeps ahead of creates
	// (Docker: spare network namespaces for sealed workers); Sweep
	// removes what of it no live manager keeps and says how many; Close
	// removes this process's share at shutdown. Engines with nothing to
	// keep do nothing.
	Prepare()
	Sweep(ctx context.Context) int
	Close(ctx context.Context)
}

// Sentinel errors an engine's errors wrap.
var (
	ErrNotFound    = errors.New("engine: not found")
	ErrConflict    = errors.New("engine: conflict")      // a name in use, an instance in the wrong state
	ErrInvalid     = errors.New("engine: invalid")       // a parameter the engine refuses
	ErrForbidden   = errors.New("engine: forbidden")     // refused for want of rights
	ErrUnavailable = errors.New("engine: not available") // the engine did not answer
	ErrUnsupported = errors.New("engine: not supported") // an operation this engine cannot do (Suspend on Kubernetes)
)

// Spec is one instance to make.
type Spec struct {
	// Name is the instance's name (InstanceName of its worker): unique on
	// the engine, so a create delivered twice makes one instance.
	Name   string
	Image  string
	Env    []string
	Labels map[string]string
	User   string // uid:gid
	// StopTimeout is how long a stop waits for the wrapper after SIGTERM.
	StopTimeout time.Duration
	Limits      Limits
	// Network is "host", "none", Sealed, or a network of the engine's.
	Network string
	Mounts  []Mount
	// Runtime is the engine's name of the sandbox the instance runs in
	// (Docker: a runtime of the engine's, such as runsc for gVisor;
	// Kubernetes: a RuntimeClass); "": the engine's default.
	Runtime string
	// Containers says the instance runs containers of its own (the DOCKER
	// capability: rootless Podman inside it, its storage in
	// protocol.DockerStorage): the engine relaxes for it what that needs
	// and nothing else; an engine that cannot (RunsContainers false)
	// refuses it with ErrInvalid.
	Containers bool
}

// Sealed is the network of a sealed worker: loopback only, its only way
// out the gateway's sockets mounted into it.
const Sealed = "sealed"

// Limits are an instance's resource limits (0: none).
type Limits struct {
	Memory int64   // bytes
	CPUs   float64 // cores
	Pids   int64
	// Disk bounds what the instance may write (its workspace, home and
	// temporary directories together), bytes; past it a write fails
	// with ENOSPC (Docker: a filesystem of its own, disks.go;
	// Kubernetes: ephemeral storage, past which the kubelet evicts the pod).
	Disk int64
}

// Mount puts a volume or a host directory into an instance.
type Mount struct {
	// Volume names a volume the engine makes on first use with Labels;
	// HostPath a directory of the host (bound). One of the two is set.
	Volume   string
	HostPath string
	Target   string
	ReadOnly bool
	Labels   map[string]string
}

// State is an instance's state.
type State string

// The states; an engine maps its own onto them.
const (
	Created   State = "created"    // made, not started
	Running   State = "running"    // started, not suspended
	Suspended State = "paused"     // frozen
	Exited    State = "exited"     // ended on its own or stopped
	Dead      State = "dead"       // ended and could not be removed cleanly
	Other     State = "restarting" // anything else the engine reports
)

// Up reports whether an instance's processes exist (running or frozen).
func (s State) Up() bool { return s == Running || s == Suspended }

// Instance is what an engine knows of one instance.
type Instance struct {
	ID string
	// Name is its name as the engine reports it (no leading "/").
	Name string
	// Worker is the worker it serves: the one its name says (a wake may
	// rename a warm worker's instance after the worker it wakes), else the
	// one its labels say it was made for.
	Worker    string
	Labels    map[string]string
	State     State
	ExitCode  int
	OOMKilled bool
	Created   time.Time
	Image     string
	// IP is its address on a network of its own ("" on the host's, none
	// or sealed).
	IP string
	// Role is "" for a worker's instance, else what the engine keeps
	// beside the workers for creates (Docker: "netns-holder", a spare
	// network namespace's holder).
	Role string
}

// Filter narrows a List.
type Filter struct {
	State State // "": every state
	// Spares includes what the engine keeps beside the workers.
	Spares bool
}

// EventKind is what happened to an instance.
type EventKind string

// The events the spawner follows.
const (
	EventDied      EventKind = "die"
	EventOOM       EventKind = "oom"
	EventSuspended EventKind = "pause"
	EventResumed   EventKind = "unpause"
)

// Event is one thing that happened to a worker's instance.
type Event struct {
	Kind     EventKind
	Worker   string
	ExitCode int // EventDied
}

// Volume is a project volume.
type Volume struct {
	Name   string
	Labels map[string]string
}

// Info is an engine's capacity.
type Info struct {
	Name      string
	CPUs      int
	MemoryMax int64 // bytes
	// Runtimes are the names of the runtimes Spec.Runtime may name (nil:
	// the engine cannot tell, and a create names any).
	Runtimes []string
}

// InstanceName is the name of a worker's instance.
func InstanceName(worker string) string { return NamePrefix + worker }

// NamePrefix starts the name of every worker's instance.
const NamePrefix = "agentvisor-"

// Wrap returns err marked as of kind (one of the sentinels above): it
// matches kind and err under errors.Is, and its text is err's own, so
// that what a consumer reads is what the engine said.
func Wrap(kind, err error) error {
	if err == nil {
		return nil
	}
	return &kindError{kind: kind, err: err}
}

type kindError struct{ kind, err error }

func (e *kindError) Error() string   { return e.err.Error() }
func (e *kindError) Unwrap() []error { return []error{e.kind, e.err} }
