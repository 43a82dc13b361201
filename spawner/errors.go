package spawner

import (
	"errors"
	"fmt"

	"github.com/agentvisor/agentvisor/client"
	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/engine"
)

// Error is a failure with a stable code, the same type a consumer's
// client returns (client.Error), so that a code survives the trip from
// the manager to its caller unchanged.
type Error = client.Error

func errorf(code protocol.Code, format string, args ...any) *Error {
	return client.Errorf(code, format, args...)
}

// ProtocolError returns the error object of a Reply.
func ProtocolError(err error) *protocol.Error {
	var se *Error
	if errors.As(err, &se) {
		return protocol.NewError(se.Code, "%v", se.Err)
	}
	var de *protocol.DecodeError
	if errors.As(err, &de) {
		return protocol.NewError(protocol.CodeInvalidCommand, "%v", err)
	}
	return protocol.NewError(protocol.CodeInternalError, "%v", err)
}

// IsResourceExhausted reports whether err is a create that found no slot.
func IsResourceExhausted(err error) bool { return client.IsResourceExhausted(err) }

// IsNotFound reports whether err names a worker that does not exist.
func IsNotFound(err error) bool { return client.IsNotFound(err) }

// IsBusy reports whether err is a pause refused because the worker has a
// task in flight.
func IsBusy(err error) bool { return client.IsBusy(err) }

// engineError classifies an engine's error by its kind (the engine
// package's sentinels), not its text: a parameter the engine refuses is
// the command's fault (INVALID_COMMAND); a conflict (a name in use, an
// instance in the wrong state) and a missing object have their own codes;
// anything else means the engine is unavailable.
func engineError(err error, format string, args ...any) *Error {
	wrapped := fmt.Errorf(format+": %w", append(args, err)...)
	switch {
	case errors.Is(err, engine.ErrInvalid):
		return &Error{Code: protocol.CodeInvalidCommand, Err: wrapped}
	case errors.Is(err, engine.ErrConflict):
		return &Error{Code: protocol.CodeConflict, Err: wrapped}
	case errors.Is(err, engine.ErrNotFound):
		return &Error{Code: protocol.CodeNotFound, Err: wrapped}
	case errors.Is(err, engine.ErrForbidden):
		return &Error{Code: protocol.CodeForbidden, Err: wrapped}
	}
	return &Error{Code: protocol.CodeUpstreamUnavailable, Err: wrapped}
}

// redisError is a failed Redis call.
func redisError(err error, format string, args ...any) *Error {
	return &Error{Code: protocol.CodeUpstreamUnavailable, Err: fmt.Errorf(format+": %w", append(args, err)...)}
}

// errForwarded: the command went to the host that serves it, which
// replies; this manager neither replies nor executes it.
var errForwarded = errors.New("spawner: forwarded to the worker's host")
