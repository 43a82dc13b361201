"""The synchronous client."""

import contextlib
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterator, List, Optional, Union

import redis
import redis.sentinel
from redis.utils import str_if_bytes

from . import _core, redisurl, types
from ._core import Keys, SentInfo
from .errors import AgentvisorError, AgentvisorTimeout, redis_error


def _primary_to_read(r: Any, deadline: Optional[float] = None) -> Any:
    """What a look for an entry reads: r itself for one server; for a
    client of sentinels, a client of its own (the caller disconnects its
    pool) of the primary _core.named_primary picks from their answers, since
    r may still be connected to the old one; None while that is not yet.
    The sentinels are asked at once, each waited on at most
    _core.sentinel_wait(deadline); the client of the primary waits at most
    what is left, once they answered, until deadline (a time.monotonic()
    time, when given)."""
    pool = getattr(r, "connection_pool", None)
    if not isinstance(pool, redis.sentinel.SentinelConnectionPool):
        return r
    # A copy: redis-py's discover_master reorders the list in place, from
    # whichever thread connects.
    sentinels = list(pool.sentinel_manager.sentinels)
    service = pool.service_name
    with ThreadPoolExecutor(max(1, len(sentinels))) as ex:
        answers = list(ex.map(lambda s: _ask_sentinel(s, service, _core.sentinel_wait(deadline)), sentinels))
    addr = _core.named_primary(answers)
    if addr is None:
        return None
    cls = redis.SSLConnection if issubclass(pool.connection_class, redis.SSLConnection) else redis.Connection
    return redis.Redis(connection_pool=redis.ConnectionPool(connection_class=cls, **_core.direct_kwargs(pool.connection_kwargs, addr, None if deadline is None else _core.time_left(deadline))))


def _ask_sentinel(sentinel: Any, master: str, timeout: float) -> Any:
    """One sentinel's answer for _core.named_primary (None when it gives
    none), on a client of its own that waits at most timeout: a sentinel
    that accepts and never replies costs that, not the socket timeout."""
    p = sentinel.connection_pool
    s = redis.Redis(connection_pool=redis.ConnectionPool(connection_class=p.connection_class, **_core.sentinel_kwargs(p.connection_kwargs, timeout)))
    try:
        try:
            m = s.sentinel_master(master)
            return (m["ip"], m["port"]), m["config-epoch"], "failover_in_progress" in m["flags"]
        except (redis.ResponseError, KeyError):
            pass  # a sentinel user not allowed SENTINEL MASTER is asked for the address alone
        addr = s.sentinel_get_master_addr_by_name(master)
        return ((str_if_bytes(addr[0]), addr[1]), 0, False) if addr else None
    except redis.RedisError:
        return None  # no answer (a timeout, a refused connection): not asked again
    finally:
        s.connection_pool.disconnect()


class _Streams:
    """XADD (confirmed by WAIT when the policy asks), and blocking reads."""

    def __init__(self, r: Any, wait: redisurl.WaitPolicy, maxlen: int) -> None:
        self.r, self.wait, self.maxlen = r, wait, maxlen

    def last_id(self, stream: str) -> str:
        msgs = self.r.xrevrange(stream, "+", "-", count=1)
        return msgs[0][0] if msgs else "0-0"

    def add(self, stream: str, doc: types.Document, redo: Optional[Callable[[Any], Any]] = None) -> str:
        """Adds doc; with WAIT, a write the primary reached after a
        failover lacks is made again there, preceded by redo(pipeline)
        (what else the write needs there: a task's run)."""
        fields = {"data": doc.to_json()}
        if self.wait.replicas <= 0:
            return self.r.xadd(stream, fields, maxlen=self.maxlen or None, approximate=True)
        # WAIT counts the writes of its own connection: one pipeline.
        for attempt in range(3):
            pipe = self.r.pipeline(transaction=False)
            if attempt > 0 and redo is not None:
                redo(pipe)
            pipe.xadd(stream, fields, maxlen=self.maxlen or None, approximate=True)
            pipe.execute_command("WAIT", self.wait.replicas, self.wait.timeout_ms)
            *_, entry_id, acked = pipe.execute()
            if acked >= self.wait.replicas:
                return entry_id
            # Short: the primary may be an old one about to be demoted, and
            # redis-py asks the sentinels only when it connects: look on the
            # primary they name by then, and add again on fresh connections.
            time.sleep(self.wait.timeout_ms / 1000)
            self.r.connection_pool.disconnect()
            if self._on_primary(stream, entry_id):
                return entry_id  # kept: no replica in sync, nothing more to wait for
        raise AgentvisorError("UPSTREAM_UNAVAILABLE", f"{stream}: added 3 times, and the primary had none of them when looked for: not confirmed", True)

    def _on_primary(self, stream: str, entry_id: str) -> bool:
        """Whether the primary has the entry, read where _primary_to_read
        says, again after a backoff while it says not yet."""
        deadline = time.monotonic() + _core.LOOK_TIMEOUT
        back = 0.1
        while (on := _primary_to_read(self.r, deadline)) is None:
            if time.monotonic() + back > deadline:
                raise redis.ConnectionError(f"no primary to look for {entry_id} of {stream} on within {_core.LOOK_TIMEOUT}s: a sentinel is failing it over, or none answers")
            time.sleep(back)
            back = min(2 * back, 2.0)
        try:
            return bool(on.xrange(stream, entry_id, entry_id))
        finally:
            if on is not self.r:
                on.connection_pool.disconnect()

    def read(self, streams: dict, block_ms: float, count: int = 100) -> Any:
        return self.r.xread(streams, count=count, block=max(1, int(block_ms)))


class Task:
    """A task sent to a worker: await its output, follow its events, cancel
    it, steer it, answer its permission requests."""

    def __init__(self, client: "Client", info: SentInfo) -> None:
        self._c = client
        self.info = info

    @property
    def request_id(self) -> str:
        return self.info.request_id

    @property
    def worker_id(self) -> str:
        return self.info.worker_id

    def events(self, timeout: float = _core.TASK_TIMEOUT) -> Iterator[_core.Event]:
        """Yields the task's progress events and permission requests (as
        Event, .doc a Progress or PermissionRequest), then its output, and
        ends. AgentvisorTimeout when the output does not come in time."""
        deadline = time.monotonic() + timeout
        last = self.info.after or "0-0"
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AgentvisorTimeout(f"task {self.request_id}: no output within {timeout}s")
            try:
                res = self._c._streams.read({self.info.output: last}, min(left * 1000, _core.BLOCK_MS))
            except redis.RedisError as e:
                raise redis_error(e, f"await {self.request_id}") from e
            for _stream, entries in res or []:
                for entry_id, ev in _core.task_events(self.info, entries):
                    last = entry_id
                    if ev is not None:
                        yield ev
                        if ev.type == "output":
                            return

    def result(self, timeout: float = _core.TASK_TIMEOUT, on_progress: Optional[Callable[[types.Progress], Any]] = None, check: bool = False) -> types.Output:
        """The task's output (whatever its status), calling on_progress with
        each Progress before it. check=True raises the output's error (its
        code, retryable) when it failed or was cancelled."""
        for ev in self.events(timeout):
            if ev.type == "output":
                err = _core.output_error(ev.doc)
                if check and err is not None:
                    raise err
                return ev.doc
            if ev.type == "progress" and on_progress is not None:
                on_progress(ev.doc)
        raise AgentvisorError("INTERNAL_ERROR", "events ended without an output")

    def cancel(self, reason: str = "") -> None:
        """Asks the worker to end the task, queued or running."""
        doc = types.Cancel.from_dict({"v": 1, "type": "cancel", "request_id": self.request_id, "reason": reason or None, "timestamp": _core.now()}, code="INVALID_COMMAND")
        self._c._add(self.info.control_stream, doc, f"cancel {self.request_id}")

    def message(self, text: str) -> None:
        """Steers the running task: text reaches the agent as a user message."""
        doc = types.Message.from_dict({"v": 1, "type": "message", "request_id": self.request_id, "text": text}, code="INVALID_COMMAND")
        self._c._add(self.info.control_stream, doc, f"message to {self.request_id}")

    def answer_permission(self, permission_id: str, allow: bool, message: str = "") -> None:
        """Allows or denies a permission request of the task (AGENT_APPROVAL)."""
        doc = types.PermissionReply.from_dict({"v": 1, "type": "permission_reply", "request_id": self.request_id,
                                               "permission_id": permission_id, "allow": bool(allow), "message": message or None}, code="INVALID_COMMAND")
        self._c._add(self.info.control_stream, doc, f"answer {permission_id} of {self.request_id}")

    def allow(self, permission_id: str) -> None:
        self.answer_permission(permission_id, True)

    def deny(self, permission_id: str, message: str = "") -> None:
        self.answer_permission(permission_id, False, message)

    def answer(self, prompt: str, **fields: Any) -> "Task":
        """Answers the task's question (it ended blocked): a new task on the
        same worker that continues its session. Returns that Task."""
        return self._c.send(self.worker_id, prompt, answers=self.request_id, **fields)

    def run(self) -> _core.Run:
        """The task's run hash."""
        return self._c.run(self.request_id)


class Client:
    """A client of the runtime over one Redis: commands to the managers,
    tasks to workers, the state the runtime keeps.

        with Client.from_env() as c:
            w = c.create_worker(agent_type="claude", project_id="demo")
            out = c.send(w.worker_id, "Say hello.").result(timeout=300)
    """

    def __init__(self, redis_client: Any, prefix: Optional[str] = None, wait: Optional[redisurl.WaitPolicy] = None, name: Optional[str] = None, command_timeout: float = _core.COMMAND_TIMEOUT, maxlen: Optional[int] = None) -> None:
        self.redis = redis_client
        self.keys = Keys(prefix if prefix is not None else os.environ.get("WORKER_KEY_PREFIX", ""))
        self.wait = wait or redisurl.WaitPolicy()
        self.name = name
        self.command_timeout = command_timeout
        self._streams = _Streams(redis_client, self.wait, _core.stream_maxlen() if maxlen is None else maxlen)

    @classmethod
    def from_url(cls, url: str, prefix: Optional[str] = None, timeout: float = 30.0, **kw: Any) -> "Client":
        """A client of the Redis at url (redis://, rediss://,
        redis+sentinel://, rediss+sentinel://); prefix defaults to
        WORKER_KEY_PREFIX, WAIT to REDIS_WAIT_REPLICAS and REDIS_WAIT_TIMEOUT."""
        u = redisurl.parse(url)
        kw.setdefault("wait", redisurl.WaitPolicy.from_env(u))
        return cls(redisurl.connect(u, timeout), prefix=prefix, **kw)

    @classmethod
    def from_env(cls, **kw: Any) -> "Client":
        """A client of REDIS_URL (else REDIS_CONSUMER_URL of the environment
        or of the project's credentials file, as workerctl), under
        WORKER_KEY_PREFIX."""
        return cls.from_url(_core.default_url(), **kw)

    def close(self) -> None:
        self.redis.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _add(self, stream: str, doc: types.Document, what: str, redo: Optional[Callable[[Any], Any]] = None) -> str:
        try:
            return self._streams.add(stream, doc, redo)
        except redis.RedisError as e:
            raise redis_error(e, what) from e

    # Commands.

    def _managers_alive(self) -> Optional[bool]:
        """Whether a manager's state hash exists; None when the user may
        not read them (a narrower ACL: the deadline alone then guards)."""
        try:
            ids = self.redis.smembers(self.keys.managers())
            return bool(ids) and self.redis.exists(*[self.keys.manager_state(i) for i in ids]) > 0
        except redis.exceptions.NoPermissionError:
            return None
        except redis.RedisError as e:
            raise redis_error(e, "read the managers' presence") from e

    def command(self, action: str, timeout: Optional[float] = None, **fields: Any) -> types.Reply:
        """Sends a command (PROTOCOL.md, "Commands and replies") and returns
        its Reply; a reply that is not ok raises AgentvisorError with its
        code. The command carries timeout as its deadline: no manager
        carries it out after. With no manager alive it raises NO_MANAGER
        within seconds (not sent, or taken back off the stream); no reply
        by the deadline raises AgentvisorTimeout, code COMMAND_EXPIRED."""
        timeout = self.command_timeout if timeout is None else timeout
        stream = self.keys.replies(self.name or _core.new_id("client", 6))
        cmd = _core.make_command(action, reply_to=stream, timestamp=_core.now(), deadline=_core.deadline_after(timeout), **fields)
        grace = time.monotonic() + _core.PRESENCE_GRACE
        while self._managers_alive() is False:
            if time.monotonic() >= grace:
                raise _core.no_manager(self.keys, "the command was not sent")
            time.sleep(0.2)
        try:
            # Replies after the stream's last entry before the command: "$"
            # would miss one written before the first XREAD.
            last = self._streams.last_id(stream)
        except redis.RedisError as e:
            raise redis_error(e, "reply stream") from e
        entry = self._add(self.keys.commands(), cmd, "send command")
        deadline = time.monotonic() + timeout + _core.REPLY_GRACE
        look, absent = time.monotonic() + _core.PRESENCE_EVERY, 0
        while (left := deadline - time.monotonic()) > 0:
            try:
                res = self._streams.read({stream: last}, min(left * 1000, _core.BLOCK_MS))
            except redis.RedisError as e:
                raise redis_error(e, "read reply") from e
            for _s, entries in res or []:
                for entry_id, fields_ in entries:
                    last = entry_id
                    reply = _core.decode_reply(fields_, cmd.command_id)
                    if reply is not None:
                        return _core.check_reply(reply)
            if time.monotonic() < look:
                continue
            look = time.monotonic() + _core.PRESENCE_EVERY
            absent = absent + 1 if self._managers_alive() is False else 0
            if absent >= 2:
                # No manager holds it: taken back, so that one started
                # later does not carry it out before its deadline.
                try:
                    self.redis.xdel(self.keys.commands(), entry)
                except redis.RedisError:
                    pass
                raise _core.no_manager(self.keys, f"command {cmd.command_id} taken back")
        raise AgentvisorTimeout(f"no reply to {cmd.command_id} within {timeout}s: a manager that reads it now does not carry it out", "COMMAND_EXPIRED")

    def create_worker(self, spec: Union[types.CommandSpec, dict, None] = None, timeout: Optional[float] = None, **spec_fields: Any) -> types.Worker:
        """Creates a worker (spec: a CommandSpec, a dict, or its fields as
        keywords: agent_type="claude", project_id=...); returns its Worker."""
        spec = spec if spec is not None else spec_fields
        worker = self.command("create", spec=spec, timeout=timeout).worker
        if worker is None:
            raise AgentvisorError("INTERNAL_ERROR", "a create's reply without its worker")
        return worker

    def delete_worker(self, worker_id: str, timeout: Optional[float] = None) -> None:
        self.command("delete", worker_id=worker_id, timeout=timeout)

    @contextlib.contextmanager
    def worker(self, spec: Union[types.CommandSpec, dict, None] = None, timeout: Optional[float] = None, **spec_fields: Any) -> Iterator[types.Worker]:
        """A worker for the block, deleted when it ends (an exception
        included): `with c.worker(agent_type="claude") as w: ...`."""
        w = self.create_worker(spec, timeout, **spec_fields)
        try:
            yield w
        finally:
            self.delete_worker(w.worker_id)

    def pause_worker(self, worker_id: str, timeout: Optional[float] = None) -> Optional[types.Worker]:
        return self.command("pause", worker_id=worker_id, timeout=timeout).worker

    def unpause_worker(self, worker_id: str, timeout: Optional[float] = None) -> Optional[types.Worker]:
        return self.command("unpause", worker_id=worker_id, timeout=timeout).worker

    def hibernate_worker(self, worker_id: str, timeout: Optional[float] = None) -> Optional[types.Worker]:
        """Hibernates an idle long-lived worker: its container goes, its id,
        streams and session stay; the next task wakes it."""
        return self.command("hibernate", worker_id=worker_id, timeout=timeout).worker

    def list_workers(self, timeout: Optional[float] = None) -> List[types.Worker]:
        return self.command("list", timeout=timeout).workers or []

    def set_budget(self, project_id: str, limit_usd: float, warn_usd: Optional[float] = None, timeout: Optional[float] = None) -> None:
        """Sets a project's budget (limit_usd 0 removes it)."""
        budget = {"limit_usd": limit_usd} if warn_usd is None else {"limit_usd": limit_usd, "warn_usd": warn_usd}
        self.command("set_budget", project_id=project_id, budget=budget, timeout=timeout)

    def reset_context(self, project_id: str, agent_type: str, timeout: Optional[float] = None) -> None:
        self.command("reset_context", project_id=project_id, agent_type=agent_type, timeout=timeout)

    # Tasks.

    def send(self, worker_id: str, prompt: str, request_id: Optional[str] = None, **task_fields: Any) -> "Task":
        """Sends a task to a worker (or the developer queue for a developer
        worker) and returns its Task; the run hash exists from now
        (requested). NOT_FOUND for a worker without a status hash."""
        task = _core.make_task(prompt, request_id, **task_fields)
        try:
            kind, agent_type = self.redis.hmget(self.keys.status(worker_id), "kind", "agent_type")
        except redis.RedisError as e:
            raise redis_error(e, f"send: read worker {worker_id}") from e
        if kind is None:
            raise AgentvisorError("NOT_FOUND", f"no worker {worker_id}")
        kind = kind or "long_lived"
        info = _core.sent_info(self.keys, task, worker_id, kind)
        run = _core.run_args(task, worker_id, kind, agent_type)

        def make_run(pipe: Any) -> None:
            pipe.eval(_core.CREATE_RUN, 1, self.keys.run(task.request_id), *run)
        try:
            pipe = self.redis.pipeline(transaction=False)
            pipe.xrevrange(info.output, "+", "-", count=1)
            make_run(pipe)
            last, _ = pipe.execute()
        except redis.RedisError as e:
            raise redis_error(e, f"send: output stream of {worker_id} and run {task.request_id}") from e
        info.after = last[0][0] if last else "0-0"
        self._add(info.input, task, f"send: task {task.request_id} to {worker_id}", make_run)
        return Task(self, info)

    def run_task(self, worker_id: str, prompt: str, timeout: float = _core.TASK_TIMEOUT, on_progress: Optional[Callable[[types.Progress], Any]] = None, check: bool = False, **task_fields: Any) -> types.Output:
        """Sends a task and awaits its output."""
        return self.send(worker_id, prompt, **task_fields).result(timeout, on_progress, check)

    def task(self, worker_id: str, request_id: str, after: str = "0-0", kind: str = "long_lived") -> "Task":
        """The Task of a request sent before (by this process or another):
        its events are read from after (by default, the stream's start)."""
        return Task(self, SentInfo(request_id, worker_id, self.keys.input(worker_id, kind), self.keys.output(worker_id, kind), after))

    # State.

    def worker_status(self, worker_id: str) -> _core.WorkerStatus:
        """A worker's status hash and heartbeat; NOT_FOUND when it has none."""
        try:
            pipe = self.redis.pipeline(transaction=False)
            pipe.hgetall(self.keys.status(worker_id))
            pipe.get(self.keys.heartbeat(worker_id))
            h, beat = pipe.execute()
        except redis.RedisError as e:
            raise redis_error(e, f"status of {worker_id}") from e
        return _core.worker_status(worker_id, h, beat)

    def workers(self) -> List[str]:
        """The ids of every worker, sorted: those of the workers set and
        the hibernated ones of every host (no container; a task wakes
        them)."""
        try:
            ids = set(self.redis.smembers(self.keys.workers()))
            for host in self.redis.smembers(self.keys.hibernated_hosts()):
                ids |= set(self.redis.smembers(self.keys.hibernated(host)))
            return sorted(ids)
        except redis.RedisError as e:
            raise redis_error(e, "workers") from e

    def run(self, request_id: str) -> _core.Run:
        """A run hash; NOT_FOUND when there is none."""
        try:
            return _core.run_of(request_id, self.redis.hgetall(self.keys.run(request_id)))
        except redis.RedisError as e:
            raise redis_error(e, f"run {request_id}") from e

    def budget(self, project_id: str) -> _core.Budget:
        """A project's budget and its spending."""
        try:
            pipe = self.redis.pipeline(transaction=False)
            pipe.hmget(self.keys.budget(project_id), "limit_usd", "warn_usd")
            pipe.hget(self.keys.usage_project(project_id), "cost_usd")
            (limit, warn), spent = pipe.execute()
        except redis.RedisError as e:
            raise redis_error(e, f"budget of {project_id}") from e
        return _core.budget_of(project_id, limit, warn, spent)

    def usage(self, project_id: str) -> _core.Usage:
        """A project's usage counters (zeros when it has none)."""
        try:
            return _core.usage_of(project_id, self.redis.hgetall(self.keys.usage_project(project_id)))
        except redis.RedisError as e:
            raise redis_error(e, f"usage of {project_id}") from e

    def lifecycle(self, from_start: bool = False, timeout: Optional[float] = None) -> Iterator[_core.Event]:
        """Yields the lifecycle stream's events (Event, .doc a
        LifecycleEvent) as they come, from its start or from now, until
        timeout seconds pass (None: for ever)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        stream = self.keys.lifecycle()
        try:
            last = "0-0" if from_start else self._streams.last_id(stream)
            while deadline is None or (left := deadline - time.monotonic()) > 0:
                block = _core.BLOCK_MS if deadline is None else min(left * 1000, _core.BLOCK_MS)
                for _s, entries in self._streams.read({stream: last}, block) or []:
                    for entry_id, fields in entries:
                        last = entry_id
                        yield _core.decode_event(stream, entry_id, fields)
        except redis.RedisError as e:
            raise redis_error(e, "lifecycle") from e
