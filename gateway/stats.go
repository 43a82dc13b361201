package gateway

import "sync/atomic"

// WorkerStats are one worker's counters since it was opened (or resumed).
type WorkerStats struct {
	Accepted   int64 `json:"accepted"`    // connections accepted, on every socket
	Open       int64 `json:"open"`        // connections open now
	Refused    int64 `json:"refused"`     // connections closed at once: over MaxConns
	DialErrors int64 `json:"dial_errors"` // connections closed because the upstream refused
	BytesUp    int64 `json:"bytes_up"`    // bytes relayed from the container to the upstreams
	BytesDown  int64 `json:"bytes_down"`  // bytes relayed from the upstreams to the container
	// Egress requests (CONNECT or plain HTTP) on egress.sock: passed on,
	// and answered 403 (not on the allowlist, or a name resolved to a
	// local address).
	EgressAllowed int64 `json:"egress_allowed"`
	EgressRefused int64 `json:"egress_refused"`
	// EgressCredentialed counts the allowed requests the gateway added a
	// credential to.
	EgressCredentialed int64 `json:"egress_credentialed"`
	// Requests on model.sock: forwarded to the model API (with the
	// worker's token), and answered 403 (without it: the agent's own).
	ModelRequests int64 `json:"model_requests"`
	ModelRefused  int64 `json:"model_refused"`
	// Git pushes through a credential (gitpush.go): passed on to the
	// task's branch, and refused (counted in egress_refused too).
	GitPushes      int64 `json:"git_pushes"`
	GitPushRefused int64 `json:"git_push_refused"`
}

// counters are one worker's WorkerStats as they run: each socket's server
// adds to its own, and GET /stats reads them all.
type counters struct {
	accepted, open, refused, dialErrors, bytesUp, bytesDown atomic.Int64
	egressAllowed, egressRefused, egressCredentialed        atomic.Int64
	modelForwarded, modelRefused                            atomic.Int64
	gitPushes, gitPushRefused                               atomic.Int64
}

func (c *counters) snapshot() WorkerStats {
	return WorkerStats{Accepted: c.accepted.Load(), Open: c.open.Load(), Refused: c.refused.Load(),
		DialErrors: c.dialErrors.Load(), BytesUp: c.bytesUp.Load(), BytesDown: c.bytesDown.Load(),
		EgressAllowed: c.egressAllowed.Load(), EgressRefused: c.egressRefused.Load(),
		EgressCredentialed: c.egressCredentialed.Load(),
		ModelRequests:      c.modelForwarded.Load(), ModelRefused: c.modelRefused.Load(),
		GitPushes: c.gitPushes.Load(), GitPushRefused: c.gitPushRefused.Load()}
}
