package kubernetes

import (
	"context"
	"errors"
	"reflect"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	clientset "k8s.io/client-go/kubernetes"

	"github.com/agentvisor/agentvisor/spawner/engine"
)

// What the engine makes of the API server's answers: their kinds in the
// engine's terms, and which calls are made again while the server cannot
// answer (a restart, a failover).

// apiCalls makes the engine's calls of the API server again while it
// cannot answer them.
type apiCalls struct{ api clientset.Interface }

// Classify wraps an API error in the engine's sentinel of its kind.
func Classify(err error) error {
	var kind error
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case apierrors.IsNotFound(err), apierrors.IsGone(err):
		kind = engine.ErrNotFound
	case apierrors.IsAlreadyExists(err), apierrors.IsConflict(err):
		kind = engine.ErrConflict
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		kind = engine.ErrInvalid
	case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
		kind = engine.ErrForbidden
	default:
		kind = engine.ErrUnavailable
	}
	return engine.Wrap(kind, err)
}

// retryFor bounds how long a call is retried while the API server does
// not answer (a restart, a failover): longer than a restart here, shorter
// than a create's patience.
const retryFor = 20 * time.Second

// retry calls f until it succeeds, fails with an answer of the API
// server, ctx ends or retryFor has passed: a call whose connection was
// refused or broken, or that the server answered 5xx or "too many
// requests", is made again. Every call retried is one the API makes safe
// to repeat: a create by name (AlreadyExists the second time), a patch
// with its uid test, a delete with its uid precondition. A refusal
// (Forbidden) is made again too while the API server says it is not
// ready: one just started refuses every request until its authorizer has
// read the cluster's roles.
func (c apiCalls) retry(ctx context.Context, f func() error) error {
	deadline := time.Now().Add(retryFor)
	wait := 200 * time.Millisecond
	for {
		err := f()
		if err == nil || !transient(err) && !(apierrors.IsForbidden(err) && !c.ready(ctx)) || time.Now().Add(wait).After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// ready reports whether the API server answers /readyz with 200. Any
// error counts as not ready, so that a server refusing /readyz itself
// while its authorizer starts is waited for too; on a cluster that
// forbids /readyz to the manager a Forbidden only comes retryFor later.
// A client without a REST client (client-go's fake) counts as ready.
func (c apiCalls) ready(ctx context.Context) bool {
	rc := c.api.Discovery().RESTClient()
	if rc == nil || reflect.ValueOf(rc).IsNil() {
		return true
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := rc.Get().AbsPath("/readyz").DoRaw(cctx)
	return err == nil
}

// transient reports whether err is the API server not answering, or
// answering that it cannot now.
func transient(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return apierrors.IsInternalError(err) || apierrors.IsServiceUnavailable(err) || apierrors.IsServerTimeout(err) ||
			apierrors.IsTooManyRequests(err) || apierrors.IsTimeout(err) || status.Status().Code >= 500
	}
	return true // no answer at all: refused, reset, timed out
}
