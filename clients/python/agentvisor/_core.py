"""What the sync and asyncio clients share: key names, the documents they
write, how they read what the runtime writes. No I/O here."""

import json
import os
import secrets
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Optional

from . import types
from ._doc import DocumentError
from .errors import AgentvisorError, from_info

DEFAULT_PREFIX = "worker"
DEFAULT_STREAM_MAXLEN = 10000
DEFAULT_PROJECT = "default"
COMMAND_TIMEOUT = 360.0  # a create may wait for a slot (WORKER_CREATION_TIMEOUT, 5 min)
TASK_TIMEOUT = 660.0  # a task's default timeout (600 s), and a little
BLOCK_MS = 1000  # the longest single XREAD BLOCK: a timeout is checked at least this often
PRESENCE_EVERY = 2.0  # how often a command's sender looks whether a manager is alive while it waits
PRESENCE_GRACE = 2.0  # how long it looks before it says none is (one started a moment before writes its state within it)
REPLY_GRACE = 2.0  # how long a sender waits past its command's deadline (a manager that began it in time answers)
CREDENTIALS_FILE = "/var/lib/agentvisor/redis/credentials.env"  # scripts/redis.sh writes the project Redis's URLs there
LOOK_TIMEOUT = 30.0  # how long a write's look for its entry waits for a primary to read
SENTINEL_TIMEOUT = 3.0  # the longest a look waits on one sentinel, to connect and for each reply

# Writes a run hash (field/value pairs) unless it exists: the sender makes
# the run requested; the wrapper moves it on, never back.
CREATE_RUN = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
"""


class Keys:
    """Every stream and key name, under a prefix (WORKER_KEY_PREFIX)."""

    def __init__(self, prefix=DEFAULT_PREFIX):
        prefix = prefix or DEFAULT_PREFIX
        if any(c in prefix for c in " \t\r\n{}") or prefix.startswith(":") or prefix.endswith(":"):
            raise AgentvisorError("INVALID_COMMAND", f"key prefix {prefix!r}: must not contain whitespace or braces, nor start or end with ':'")
        self.prefix = prefix

    def _join(self, *parts):
        return ":".join((self.prefix,) + parts)

    def commands(self):
        return self._join("commands")

    def lifecycle(self):
        return self._join("lifecycle")

    def status(self, worker_id):
        return self._join("status", worker_id)

    def heartbeat(self, worker_id):
        return self._join("heartbeat", worker_id)

    def input(self, worker_id, kind="long_lived", priority=None):
        """A worker's input: for a developer worker, the developer queue of
        the task's priority (high, normal, low; None is normal)."""
        return self.developer_input(priority) if kind == "developer" else self._join(worker_id, "input")

    def developer_input(self, priority=None):
        """The developer queue of a priority: the normal one is
        developer:input, high and low have a stream each."""
        if priority in (None, "", "normal"):
            return self._join("developer", "input")
        if priority not in ("high", "low"):
            raise AgentvisorError("INVALID_TASK", f"priority {priority!r}: want high, normal or low")
        return self._join("developer", "input", priority)

    def developer_inputs(self):
        """The developer queues, highest priority first."""
        return [self.developer_input(p) for p in ("high", "normal", "low")]

    def output(self, worker_id, kind="long_lived"):
        return self._join("developer", "output") if kind == "developer" else self._join(worker_id, "output")

    def run(self, request_id):
        return self._join("run", request_id)

    def workers(self):
        return self._join("workers")

    def hibernated_hosts(self):
        """The hosts that have had a hibernated worker (a set)."""
        return self._join("hibernated", "hosts")

    def hibernated(self, host):
        """The hibernated workers of one host (no container; a task wakes them)."""
        return self._join("hibernated", "host", host)

    def usage_project(self, project):
        return self._join("usage", "project", project)

    def budget(self, project):
        return self._join("budget", "project", project)

    def replies(self, client):
        return self._join("replies", client)

    def managers(self):
        """The ids of the managers that wrote a state hash (a set)."""
        return self._join("managers")

    def manager_state(self, manager_id):
        """A running manager's state hash, which expires 30 s after its last refresh."""
        return self._join("manager", manager_id)


def named_primary(answers):
    """The (host, port) of the primary a look for an entry reads, from
    every sentinel's answer: None, or ((host, port), config epoch, failing
    over). The address named under the newest configuration epoch (a
    sentinel that has not heard of a failover names the old primary under
    an older one), the one most of them name among equals, then the lowest.
    None, "not yet", while a sentinel says it is failing the master over
    (from the promotion of a replica to the end of the failover the old
    primary still takes writes and answers reads, and drops them when it is
    demoted), or when none answered."""
    votes = {}
    for answer in answers:
        if answer is None:
            continue
        addr, epoch, failing = answer
        if failing:
            return None
        votes[(epoch, addr)] = votes.get((epoch, addr), 0) + 1
    if not votes:
        return None
    return min(votes, key=lambda k: (-k[0], -votes[k], k[1]))[1]


def direct_kwargs(connection_kwargs, addr, timeout=None):
    """A sentinel pool's connection keywords (the user, password, db and
    TLS settings of its connections) for a connection of one's own to addr,
    which waits at most timeout (when given) to connect and for each reply."""
    kw = {k: v for k, v in connection_kwargs.items() if k != "connection_pool"}
    kw["host"], kw["port"] = addr
    if timeout is not None:
        for k in ("socket_timeout", "socket_connect_timeout"):
            kw[k] = timeout if kw.get(k) is None else min(kw[k], timeout)
    return kw


def time_left(deadline):
    """What is left until deadline (time.monotonic()), a tenth of a second
    at least: a socket timeout of 0 would not wait at all."""
    return max(0.1, deadline - time.monotonic())


def sentinel_wait(deadline):
    """How long a look that must end by deadline (time.monotonic(); None:
    no end) waits on one sentinel: SENTINEL_TIMEOUT, or what is left."""
    return SENTINEL_TIMEOUT if deadline is None else min(SENTINEL_TIMEOUT, time_left(deadline))


def sentinel_kwargs(connection_kwargs, timeout):
    """A sentinel client's connection keywords for a look's client of its
    own, which waits at most timeout to connect and for each reply."""
    return {**connection_kwargs, "socket_timeout": timeout, "socket_connect_timeout": timeout}


def now():
    """The time as the protocol writes it: RFC 3339, UTC, nanoseconds."""
    ns = time.time_ns()
    return datetime.fromtimestamp(ns // 10**9, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S") + f".{ns % 10**9:09d}Z"


def deadline_after(seconds):
    """The RFC 3339 time seconds from now: a command's deadline."""
    ns = time.time_ns() + int(seconds * 1e9)
    return datetime.fromtimestamp(ns // 10**9, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S") + f".{ns % 10**9:09d}Z"


def default_url(environ=None, path=CREDENTIALS_FILE):
    """The Redis URL of a client given none: REDIS_URL, else
    REDIS_CONSUMER_URL of the environment, else of the project's
    credentials file (as workerctl reads them). INVALID_COMMAND saying how
    to give one when there is none."""
    env = os.environ if environ is None else environ
    for name in ("REDIS_URL", "REDIS_CONSUMER_URL"):
        if env.get(name):
            return env[name]
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                k, sep, v = line.strip().removeprefix("export ").partition("=")
                v = v.strip()
                if len(v) >= 2 and v[0] in "\"'" and v[-1] == v[0]:
                    v = v[1:-1]
                if sep and k.strip() == "REDIS_CONSUMER_URL" and v:
                    return v
        problem = f"{path} has no REDIS_CONSUMER_URL"
    except OSError as e:
        problem = f"{path} cannot be read ({e.strerror})"
    raise AgentvisorError("INVALID_COMMAND", f"REDIS_URL is not set and {problem} (the project's Redis: `bash scripts/redis.sh` writes it; or set REDIS_URL)")


def no_manager(keys, what):
    return AgentvisorError("NO_MANAGER", f"no worker-manager is alive on this Redis with key prefix {keys.prefix!r} "
                                         f"(start worker-manager, or check REDIS_URL and WORKER_KEY_PREFIX): {what}")


def new_id(prefix, nbytes=8):
    return f"{prefix}-{secrets.token_hex(nbytes)}"


def stream_maxlen(environ=None):
    env = os.environ if environ is None else environ
    v = env.get("STREAM_MAXLEN", "").strip()
    return int(v) if v.isdigit() else DEFAULT_STREAM_MAXLEN


def entry_data(fields):
    """The JSON of a stream entry's one field, data."""
    data = fields.get("data") if isinstance(fields, dict) else None
    if data is None:
        raise DocumentError("INTERNAL_ERROR", "stream entry without a data field")
    return data


def make_command(action, **fields):
    """A command document, checked against the schema (INVALID_COMMAND)."""
    doc = {"v": 1, "type": "command", "command_id": fields.pop("command_id", None) or new_id("cmd"), "action": action}
    doc.update({k: _plain(v) for k, v in fields.items() if v is not None})
    return types.Command.from_dict(doc, code="INVALID_COMMAND")


def make_task(prompt, request_id=None, **fields):
    """A task document, checked against the schema (INVALID_TASK)."""
    doc = {"v": 1, "type": "task", "request_id": request_id or f"task-{time.time_ns()}", "prompt": prompt}
    doc.update({k: _plain(v) for k, v in fields.items() if v is not None})
    return types.Task.from_dict(doc, code="INVALID_TASK")


def _plain(v):
    return v.to_dict() if isinstance(v, types.Document) else v


def decode_reply(fields, command_id):
    """The reply of command_id in a reply stream entry, or None (another
    command's, or no reply at all)."""
    try:
        reply = types.Reply.from_json(entry_data(fields))
    except AgentvisorError:
        return None
    return reply if reply.command_id == command_id else None


def check_reply(reply):
    """Returns a reply that is ok; raises its error otherwise."""
    if not reply.ok:
        raise from_info(reply.error, reply)
    return reply


@dataclass
class Event:
    """One decoded entry of the lifecycle or an output stream. doc is a
    LifecycleEvent, Progress, PermissionRequest or Output, unless error says
    why the entry could not be decoded (data then holds it as read)."""

    stream: str
    id: str
    type: str = ""
    doc: Any = None
    data: str = ""
    error: Optional[AgentvisorError] = None

    @property
    def request_id(self):
        return getattr(self.doc, "request_id", None)

    @property
    def worker_id(self):
        return getattr(self.doc, "worker_id", None)


_EVENT_CLASSES = {
    "lifecycle": types.LifecycleEvent,
    "progress": types.Progress,
    "output": types.Output,
    "permission_request": types.PermissionRequest,
}


def decode_event(stream, entry_id, fields):
    ev = Event(stream=stream, id=entry_id)
    try:
        ev.data = entry_data(fields)
        raw = json.loads(ev.data)
        ev.type = raw.get("type", "") if isinstance(raw, dict) else ""
        cls = _EVENT_CLASSES.get(ev.type)
        if cls is None:
            raise DocumentError("INTERNAL_ERROR", f"unexpected entry type {ev.type!r} on {stream}")
        ev.doc = cls.from_dict(raw)
    except ValueError as e:
        ev.error = DocumentError("INTERNAL_ERROR", f"entry {entry_id} of {stream}: not JSON: {e}")
    except AgentvisorError as e:
        ev.error = e
    return ev


@dataclass
class SentInfo:
    """A task on its way: where its output will appear, and the entry of
    that stream after which to look for it. input is the stream the task
    went to; control is where its cancel, messages and permission replies
    go: the worker's input, or the normal developer queue for a developer
    task of any priority ("" in a SentInfo made by hand: input)."""

    request_id: str
    worker_id: str
    input: str
    output: str
    after: str = "0-0"
    control: str = ""

    @property
    def control_stream(self):
        return self.control or self.input


def sent_info(keys, task, worker_id, kind):
    """Where task goes for a worker of kind: a developer task to its
    priority's queue, its control documents to the normal one."""
    return SentInfo(task.request_id, worker_id, keys.input(worker_id, kind, task.priority),
                    keys.output(worker_id, kind), control=keys.input(worker_id, kind))


def run_args(task, worker_id, kind, agent_type=None):
    """The field/value pairs of a new run hash (requested); agent_type is
    the worker's (the run's agent_slug)."""
    t = now()
    return [
        "request_id", task.request_id, "task_id", task.task_id or "",
        "worker_id", "" if kind == "developer" else worker_id,
        "project_id", task.project_id or DEFAULT_PROJECT,
        "agent_slug", agent_type or "", "trigger", task.trigger or "", "status", "requested",
        "created_at", t, "updated_at", t,
    ]


def task_events(sent, entries):
    """The entries of sent's task among an output stream's (id, fields):
    yields (last id, event or None); the event after which to stop is its
    output."""
    for entry_id, fields in entries:
        ev = decode_event(sent.output, entry_id, fields)
        if ev.doc is not None and ev.request_id == sent.request_id and ev.type in ("progress", "permission_request", "output"):
            yield entry_id, ev
        else:
            yield entry_id, None


@dataclass
class WorkerStatus:
    """A worker's status hash and its last heartbeat (None when it has none
    or it does not decode)."""

    id: str
    hash: dict = field(default_factory=dict)
    heartbeat: Optional[types.Heartbeat] = None

    @property
    def status(self):
        return self.hash.get("status", "")

    @property
    def kind(self):
        return self.hash.get("kind", "") or "long_lived"


def worker_status(worker_id, h, beat):
    if not h:
        raise AgentvisorError("NOT_FOUND", f"no worker {worker_id}")
    hb = None
    if beat:
        try:
            hb = types.Heartbeat.from_json(beat)
        except AgentvisorError:
            pass
    return WorkerStatus(worker_id, dict(h), hb)


@dataclass
class Run:
    """A run hash (PROTOCOL.md, "Run hash"): every field as a string."""

    request_id: str
    hash: dict = field(default_factory=dict)

    @property
    def status(self):
        return self.hash.get("status", "")

    @property
    def terminal(self):
        return self.status in ("completed", "failed")

    def get(self, name, default=""):
        return self.hash.get(name, default)


def run_of(request_id, h):
    if not h:
        raise AgentvisorError("NOT_FOUND", f"no run {request_id}")
    return Run(request_id, dict(h))


@dataclass
class Budget:
    """A project's budget (limit_usd 0: none) and what it has spent."""

    project_id: str
    limit_usd: float = 0.0
    warn_usd: float = 0.0
    spent_usd: float = 0.0


def _num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return 0.0


def budget_of(project, limit, warn, spent):
    return Budget(project, _num(limit), _num(warn), _num(spent))


@dataclass
class Usage:
    """What a project's tasks used (PROTOCOL.md, "Sessions and usage")."""

    project_id: str
    tasks: int = 0
    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_creation: int = 0
    cost_usd: float = 0.0


def usage_of(project, h):
    n = {k: int(_num(h.get(k))) for k in ("tasks", "input", "output", "cache_read", "cache_creation")}
    return Usage(project, cost_usd=_num(h.get("cost_usd")), **n)


def output_error(out):
    """The error of an output that did not complete (None for complete
    and blocked)."""
    if out.status in ("failed", "cancelled") and out.error is not None:
        return from_info(out.error, out)
    return None
