package spawner

import (
	"errors"
	"fmt"

	"github.com/docker/docker/errdefs"

	"github.com/agentvisor/agentvisor/protocol"
)

// Error is a spawner failure with a stable code.
type Error struct {
	Code protocol.Code
	Err  error
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

func errorf(code protocol.Code, format string, args ...any) *Error {
	return &Error{code, fmt.Errorf(format, args...)}
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
func IsResourceExhausted(err error) bool { return hasCode(err, protocol.CodeResourceExhausted) }

// IsNotFound reports whether err names a worker that does not exist.
func IsNotFound(err error) bool { return hasCode(err, protocol.CodeNotFound) }

// IsBusy reports whether err is a pause refused because the worker has a
// task in flight.
func IsBusy(err error) bool { return hasCode(err, protocol.CodeWorkerBusy) }

func hasCode(err error, code protocol.Code) bool {
	var se *Error
	return errors.As(err, &se) && se.Code == code
}

// engineError classifies an error of the Docker engine by its kind, not
// its text: a parameter the engine refuses is the command's fault
// (INVALID_COMMAND); a conflict (a name in use, a container in the wrong
// state) and a missing object have their own codes; anything else means
// the engine is unavailable.
func engineError(err error, format string, args ...any) *Error {
	wrapped := fmt.Errorf(format+": %w", append(args, err)...)
	switch {
	case errdefs.IsInvalidParameter(err):
		return &Error{protocol.CodeInvalidCommand, wrapped}
	case errdefs.IsConflict(err):
		return &Error{protocol.CodeConflict, wrapped}
	case errdefs.IsNotFound(err):
		return &Error{protocol.CodeNotFound, wrapped}
	case errdefs.IsForbidden(err), errdefs.IsUnauthorized(err):
		return &Error{protocol.CodeForbidden, wrapped}
	}
	return &Error{protocol.CodeUpstreamUnavailable, wrapped}
}

// redisError is a failed Redis call.
func redisError(err error, format string, args ...any) *Error {
	return &Error{protocol.CodeUpstreamUnavailable, fmt.Errorf(format+": %w", append(args, err)...)}
}
