"""Errors with the protocol's stable codes (PROTOCOL.md, "Error codes")."""

import builtins

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
}


class AgentvisorError(Exception):
    """A failure with a stable code: a reply that was not ok carries the
    manager's code and retryable; a call that could not reach Redis is
    UPSTREAM_UNAVAILABLE; a document that does not validate INVALID_TASK
    or INVALID_COMMAND. reply is the reply or output that carried it."""

    def __init__(self, code, message, retryable=None, reply=None):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.retryable = RETRYABLE.get(code, False) if retryable is None else retryable
        self.reply = reply


class AgentvisorTimeout(AgentvisorError, builtins.TimeoutError):
    """No reply or output came before the call's timeout. The request may
    still be served: its code is UPSTREAM_UNAVAILABLE, retryable."""

    def __init__(self, message):
        super().__init__("UPSTREAM_UNAVAILABLE", message, True)


def from_info(info, reply=None):
    """The error of a reply or output's error object (an ErrorInfo)."""
    return AgentvisorError(info.code, info.message, info.retryable, reply)


def redis_error(err, what):
    """A failed Redis call."""
    return AgentvisorError("UPSTREAM_UNAVAILABLE", f"{what}: {err}", True)
