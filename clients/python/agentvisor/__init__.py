"""agentvisor: a Python client of the agentvisor runtime.

Client (synchronous) and AsyncClient (asyncio) create and delete workers
through the command stream, send tasks and follow them to their output,
and read the state the runtime keeps in Redis, as protocol/PROTOCOL.md
describes. The documents are the dataclasses of agentvisor.types,
generated from the protocol's JSON Schemas.
"""

from . import types
from ._core import Budget, Event, Keys, Run, SentInfo, Usage, WorkerStatus
from ._doc import DocumentError
from .aio import AsyncClient, AsyncTask
from .client import Client, Task
from .errors import RETRYABLE, AgentvisorError, AgentvisorTimeout
from .redisurl import BadRedisURL, RedisURL, WaitPolicy
from .redisurl import parse as parse_redis_url
from .types import CommandSpec as WorkerSpec
from .types import LifecycleEvent, Output, PermissionRequest, Progress, Reply, Worker

__version__ = "0.1.0"

__all__ = [
    "AgentvisorError", "AgentvisorTimeout", "AsyncClient", "AsyncTask", "BadRedisURL", "Budget", "Client",
    "DocumentError", "Event", "Keys", "LifecycleEvent", "Output", "PermissionRequest", "Progress", "RETRYABLE",
    "RedisURL", "Reply", "Run", "SentInfo", "Task", "Usage", "WaitPolicy", "Worker", "WorkerSpec", "WorkerStatus",
    "parse_redis_url", "types",
]
