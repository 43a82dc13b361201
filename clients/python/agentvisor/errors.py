"""Errors with the protocol's stable codes (PROTOCOL.md, "Error codes")."""

import builtins
from typing import Any, Optional

import redis

# Whether sending the same request again may succeed, per code, as the
# protocol's table says (a test checks it covers every code of the schema).
RETRYABLE = {
    "AGENT_TIMEOUT": True,
    "AGENT_CRASHED": True,
    "AGENT_ERROR": True,
    "NO_STOP_OUTPUT": False,
    "INVALID_STOP_OUTPUT": False,
    "OUTPUT_TOO_LARGE": False,
    "TASK_FAILED": False,
    "OOM_KILLED": True,
    "KILLED": True,
    "TERMINATED": True,
    "RESUME_FAILED": True,
    "INVALID_TASK": False,
    "INVALID_COMMAND": False,
    "NOT_FOUND": False,
    "FORBIDDEN": False,
    "UPSTREAM_UNAVAILABLE": True,
    "RESOURCE_EXHAUSTED": True,
    "INTERNAL_ERROR": False,
    "WORKER_BUSY": True,
    "CONFLICT": True,
    "SHUTTING_DOWN": True,
    "REPLACE_LIMIT": False,
    "MCP_UNAVAILABLE": True,
    "CANCELLED": False,
    "AUTH_FAILED": False,
    "RATE_LIMITED": True,
    "BUDGET_EXCEEDED": False,
    "AGENT_STALLED": True,
    "HOST_LOST": True,
    "NO_HOST": True,
    "WORKER_GONE": False,
    "COMMAND_EXPIRED": True,
    "NO_MANAGER": True,
    "REDIS_AUTH_FAILED": False,
    "GIT_WORKTREE_FAILED": True,
    "GIT_PUSH_FAILED": True,
    "IMAGE_NOT_ALLOWED": False,
    "IMAGE_BUILD_FAILED": False,
    "RUNTIME_UNAVAILABLE": False,
}


class AgentvisorError(Exception):
    """A failure with a stable code: a reply that was not ok carries the
    manager's code and retryable; a call that could not reach Redis is
    UPSTREAM_UNAVAILABLE (REDIS_AUTH_FAILED when Redis refused the
    credentials, FORBIDDEN for a command the user may not run); a document
    that does not validate INVALID_TASK or INVALID_COMMAND; no manager
    alive NO_MANAGER. reply is the reply or output that carried it."""

    def __init__(self, code: str, message: str, retryable: Optional[bool] = None, reply: Any = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.retryable: bool = RETRYABLE.get(code, False) if retryable is None else retryable
        self.reply = reply


class AgentvisorTimeout(AgentvisorError, builtins.TimeoutError):
    """No reply or output came before the call's timeout. For a task the
    request may still be served (UPSTREAM_UNAVAILABLE, retryable); for a
    command it is not: the command carried the timeout as its deadline,
    and no manager carries it out after (COMMAND_EXPIRED)."""

    def __init__(self, message: str, code: str = "UPSTREAM_UNAVAILABLE") -> None:
        super().__init__(code, message, True)


def from_info(info: Any, reply: Any = None) -> AgentvisorError:
    """The error of a reply or output's error object (an ErrorInfo)."""
    return AgentvisorError(info.code, info.message, info.retryable, reply)


def redis_error(err: BaseException, what: str) -> AgentvisorError:
    """A failed Redis call, by cause: the credentials refused
    (REDIS_AUTH_FAILED, not retryable), a command the user may not run
    (FORBIDDEN), else UPSTREAM_UNAVAILABLE saying whether the connection
    was refused or timed out."""
    # Redis names an error by its first word; redis-py 4 maps NOAUTH to
    # AuthenticationError and leaves WRONGPASS a ResponseError.
    if isinstance(err, redis.AuthenticationError) or (isinstance(err, redis.ResponseError) and str(err).startswith("WRONGPASS")):
        return AgentvisorError("REDIS_AUTH_FAILED", f"{what}: Redis refused the user or password: {err}")
    if isinstance(err, redis.exceptions.NoPermissionError):
        return AgentvisorError("FORBIDDEN", f"{what}: the Redis user may not: {err}")
    cause = ""
    if isinstance(err, redis.TimeoutError) or isinstance(err.__context__, builtins.TimeoutError):
        cause = " (timed out)"
    elif isinstance(err.__context__, ConnectionRefusedError):
        cause = " (connection refused: is Redis running at that address?)"
    return AgentvisorError("UPSTREAM_UNAVAILABLE", f"{what}: {err}{cause}", True)
