package protocol

import "fmt"

// Code is a stable error code that consumers branch on. The human message
// beside it may change; the code does not.
type Code string

const (
	// The agent ran past its task's timeout and was stopped.
	CodeAgentTimeout Code = "AGENT_TIMEOUT"
	// The agent process (or its container) died without a result.
	CodeAgentCrashed Code = "AGENT_CRASHED"
	// The agent reported an error result (an API error, a refused
	// request, too many turns).
	CodeAgentError Code = "AGENT_ERROR"
	// The agent ended well but gave no stop output (see PROTOCOL.md).
	CodeNoStopOutput Code = "NO_STOP_OUTPUT"
	// The agent ended with a stop output that is not one: a status other
	// than complete, blocked or failed, a blocked without a question, a
	// result that is not an object. What an agent prints cannot be
	// trusted, so this is an answer, not a crash.
	CodeInvalidStopOutput Code = "INVALID_STOP_OUTPUT"
	// The agent's final text is longer than MaxStopSearch (16 MiB) and its
	// last 16 MiB hold no stop output.
	CodeOutputTooLarge Code = "OUTPUT_TOO_LARGE"
	// The agent's own stop output said failed: it could not do the task.
	CodeTaskFailed Code = "TASK_FAILED"
	// The kernel's OOM killer ended the container.
	CodeOOMKilled Code = "OOM_KILLED"
	// The container was killed (SIGKILL, exit 137) without an OOM event.
	CodeKilled Code = "KILLED"
	// The container was terminated (SIGTERM, exit 143) mid-task.
	CodeTerminated Code = "TERMINATED"
	// Resuming the agent session failed. The wrapper retries in a new
	// session, so this code shows on a session decision, rarely on a
	// failure.
	CodeResumeFailed Code = "RESUME_FAILED"
	// A task entry could not be decoded or was not valid.
	CodeInvalidTask Code = "INVALID_TASK"
	// A command entry could not be decoded or was not valid.
	CodeInvalidCommand Code = "INVALID_COMMAND"
	// The worker or run a command names does not exist.
	CodeNotFound Code = "NOT_FOUND"
	// A progress call or command was refused by ALLOWED_COMMANDS.
	CodeForbidden Code = "FORBIDDEN"
	// A service the runtime depends on (Redis, the Docker engine, the
	// model API) did not answer.
	CodeUpstreamUnavailable Code = "UPSTREAM_UNAVAILABLE"
	// No slot freed for a create within WORKER_CREATION_TIMEOUT.
	CodeResourceExhausted Code = "RESOURCE_EXHAUSTED"
	// A bug or an unexpected state in the runtime itself.
	CodeInternalError Code = "INTERNAL_ERROR"
	// CodeWorkerBusy: a pause asked of a worker with a task in flight.
	CodeWorkerBusy Code = "WORKER_BUSY"
	// CodeConflict: the engine refused because of the object's state (a
	// name in use, a container not in the state the call needs).
	CodeConflict Code = "CONFLICT"
	// CodeShuttingDown: the manager that held the command is stopping; a
	// queued create is answered with it at once. Send the command again.
	CodeShuttingDown Code = "SHUTTING_DOWN"
	// CodeReplaceLimit: a worker that kept dying was replaced as often as
	// allowed; its spec is marked failed.
	CodeReplaceLimit Code = "REPLACE_LIMIT"
	// CodeMCPUnavailable: an MCP server of the worker's spec did not
	// start or connect when the agent began; the agent was stopped rather
	// than left to work without it.
	CodeMCPUnavailable Code = "MCP_UNAVAILABLE"
	// CodeCancelled: a cancel document ended the task (the error of an
	// output whose status is cancelled).
	CodeCancelled Code = "CANCELLED"
	// CodeAuthFailed: the model API refused the credential (HTTP 401 or
	// 403). The wrapper stops the agent at the first refusal: retrying with
	// the same key cannot succeed.
	CodeAuthFailed Code = "AUTH_FAILED"
	// CodeRateLimited: the model API kept answering 429 or 529 past what
	// the task could wait.
	CodeRateLimited Code = "RATE_LIMITED"
	// CodeAgentStalled: a live agent printed nothing for STALL_TIMEOUT.
	CodeAgentStalled Code = "AGENT_STALLED"
	// CodeBudgetExceeded: the task's max_budget_usd or its project's budget
	// is spent; a task of a project over its limit is refused before any
	// model call.
	CodeBudgetExceeded Code = "BUDGET_EXCEEDED"
	// CodeHostLost: the worker's host (its engine and managers) stopped
	// answering; the worker was retired by another host's manager.
	CodeHostLost Code = "HOST_LOST"
	// CodeNoHost: no live host of the fleet matches the create's
	// placement, or the worker's host is not live to act on it.
	CodeNoHost Code = "NO_HOST"
	// CodeWorkerGone: the task was sent to a worker that had been retired
	// (deleted, or dead and not replaced under its id); the manager
	// answers it until the worker's retention ends.
	CodeWorkerGone Code = "WORKER_GONE"
	// CodeCommandExpired: the command's deadline passed before a manager
	// carried it out, or while one did: it was not carried out (a create
	// made no worker, a delete removed nothing). Send it again with a new
	// deadline.
	CodeCommandExpired Code = "COMMAND_EXPIRED"
	// CodeNoManager: no worker-manager is alive on the Redis and key
	// prefix the command was for (none has a state hash); a client did not
	// send the command, or withdrew it.
	CodeNoManager Code = "NO_MANAGER"
	// CodeRedisAuth: Redis refused the client's credentials (WRONGPASS,
	// NOAUTH): the same user and password cannot succeed.
	CodeRedisAuth Code = "REDIS_AUTH_FAILED"
	// CodeGitWorktree: the task's worktree could not be made (the
	// remote did not answer or refused, the base or the branch is not
	// there, the workspace holds another repository); the agent did not
	// run.
	CodeGitWorktree Code = "GIT_WORKTREE_FAILED"
	// CodeGitPush: the agent ran, but its work could not be committed or
	// pushed to the task's branch (the gateway refused, the branch moved
	// and is no fast-forward); the output's git says what is where.
	CodeGitPush Code = "GIT_PUSH_FAILED"
	// CodeImageNotAllowed: the spec's project image names a base image
	// the operator's PROJECT_IMAGE_BASES does not allow.
	CodeImageNotAllowed Code = "IMAGE_NOT_ALLOWED"
	// CodeImageBuildFailed: the worker's image could not be built (a step
	// of the project's Dockerfile failed, a base image is not on the
	// host, the build ran past PROJECT_IMAGE_BUILD_TIMEOUT); the message
	// ends with the build log's last lines.
	CodeImageBuildFailed Code = "IMAGE_BUILD_FAILED"
	// CodeRuntimeUnavailable: the spec's runtime cannot run on this
	// manager: gvisor asked of a manager whose workers are not sealed, or
	// of an engine that has no gVisor runtime registered.
	CodeRuntimeUnavailable Code = "RUNTIME_UNAVAILABLE"
)

// codeInfo holds whether retrying the same request may succeed.
var codeInfo = map[Code]bool{
	CodeAgentTimeout:        true,  // with more time
	CodeAgentCrashed:        true,  // the crash may be transient
	CodeAgentError:          true,  // API errors are often transient
	CodeNoStopOutput:        false, // the agent did what it did
	CodeInvalidStopOutput:   false, // the same task makes the same output
	CodeOutputTooLarge:      false,
	CodeTaskFailed:          false, // the agent judged it could not
	CodeOOMKilled:           true,  // with more memory
	CodeKilled:              true,
	CodeTerminated:          true,  // with more time
	CodeResumeFailed:        true,  // a new session will be used
	CodeInvalidTask:         false, // the same input fails again
	CodeInvalidCommand:      false,
	CodeNotFound:            false,
	CodeForbidden:           false,
	CodeUpstreamUnavailable: true,
	CodeResourceExhausted:   true,
	CodeInternalError:       false,
	CodeWorkerBusy:          true, // once its task ends
	CodeConflict:            true,
	CodeShuttingDown:        true, // another manager serves it
	CodeReplaceLimit:        false,
	CodeMCPUnavailable:      true,  // a server may start the next time
	CodeCancelled:           false, // the producer asked for it
	CodeAuthFailed:          false, // not with the same credential
	CodeRateLimited:         true,  // after the limit resets
	CodeAgentStalled:        true,
	CodeBudgetExceeded:      false, // not until the budget is raised
	CodeHostLost:            true,  // on another host
	CodeNoHost:              true,  // once a matching host is live
	CodeWorkerGone:          false, // not to this worker: to another one
	CodeCommandExpired:      true,  // with a new deadline
	CodeNoManager:           true,  // once a manager runs
	CodeRedisAuth:           false, // not with the same credentials
	CodeGitWorktree:         true,  // a remote that did not answer may
	CodeGitPush:             true,  // the work is kept in the worktree; a retry pushes it again
	CodeImageNotAllowed:     false, // not until the operator allows it
	CodeImageBuildFailed:    false, // the same Dockerfile fails again
	CodeRuntimeUnavailable:  false, // not on this manager
}

// Codes lists every code, in a stable order.
var Codes = []Code{
	CodeAgentTimeout, CodeAgentCrashed, CodeAgentError, CodeNoStopOutput, CodeInvalidStopOutput, CodeOutputTooLarge, CodeTaskFailed,
	CodeOOMKilled, CodeKilled, CodeTerminated, CodeResumeFailed,
	CodeInvalidTask, CodeInvalidCommand, CodeNotFound, CodeForbidden,
	CodeUpstreamUnavailable, CodeResourceExhausted, CodeInternalError,
	CodeWorkerBusy, CodeConflict, CodeShuttingDown, CodeReplaceLimit, CodeMCPUnavailable,
	CodeCancelled, CodeAuthFailed, CodeRateLimited, CodeAgentStalled, CodeBudgetExceeded,
	CodeHostLost, CodeNoHost, CodeWorkerGone, CodeCommandExpired, CodeNoManager, CodeRedisAuth, CodeGitWorktree, CodeGitPush,
	CodeImageNotAllowed, CodeImageBuildFailed, CodeRuntimeUnavailable,
}

// Valid reports whether c is a known code.
func (c Code) Valid() bool { _, ok := codeInfo[c]; return ok }

// Retryable reports whether the same request may succeed if sent again.
// Unknown codes are not retryable.
func (c Code) Retryable() bool { return codeInfo[c] }

// Error is the error object carried by Output and Reply: a stable code, a
// human message, and whether a retry may succeed.
type Error struct {
	Code      Code   `json:"code"`
	Message   string `json:"message"`
	Retryable bool   `json:"retryable"`
}

// NewError returns an Error whose retryable flag comes from the code.
func NewError(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Retryable: code.Retryable()}
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

func (e *Error) validate(path string) error {
	if e == nil {
		return nil
	}
	if !e.Code.Valid() {
		return fieldErr(path+".code", "unknown error code %q", e.Code)
	}
	if e.Message == "" {
		return fieldErr(path+".message", "required")
	}
	return nil
}
