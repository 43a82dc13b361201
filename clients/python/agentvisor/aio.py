"""The asyncio client: the verbs of the synchronous one, awaited, with
async iteration over a task's events (async for ev in task.events())."""

import asyncio
import contextlib
import os
import time
from typing import Any, AsyncIterator, Callable, List, Optional, Union

import redis
import redis.asyncio
from redis.utils import str_if_bytes

from . import _core, redisurl, types
from ._core import Keys, SentInfo
from .errors import AgentvisorError, AgentvisorTimeout, redis_error


async def _primary_to_read(r: Any, deadline: Optional[float] = None) -> Any:
    """The asyncio form of agentvisor.client._primary_to_read."""
    pool = getattr(r, "connection_pool", None)
    if not isinstance(pool, redis.asyncio.SentinelConnectionPool):
        return r
    sentinels = list(pool.sentinel_manager.sentinels)
    addr = _core.named_primary(await asyncio.gather(*(_ask_sentinel(s, pool.service_name, _core.sentinel_wait(deadline)) for s in sentinels)))
    if addr is None:
        return None
    cls = redis.asyncio.SSLConnection if issubclass(pool.connection_class, redis.asyncio.SSLConnection) else redis.asyncio.Connection
    return redis.asyncio.Redis(connection_pool=redis.asyncio.ConnectionPool(connection_class=cls, **_core.direct_kwargs(pool.connection_kwargs, addr, None if deadline is None else _core.time_left(deadline))))


async def _ask_sentinel(sentinel: Any, master: str, timeout: float) -> Any:
    """The asyncio form of agentvisor.client._ask_sentinel."""
    p = sentinel.connection_pool
    s: redis.asyncio.Redis = redis.asyncio.Redis(connection_pool=redis.asyncio.ConnectionPool(connection_class=p.connection_class, **_core.sentinel_kwargs(p.connection_kwargs, timeout)))
    try:
        try:
            m = await s.sentinel_master(master)
            return (m["ip"], m["port"]), m["config-epoch"], "failover_in_progress" in m["flags"]
        except (redis.ResponseError, KeyError):
            pass  # a sentinel user not allowed SENTINEL MASTER is asked for the address alone
        addr = await s.sentinel_get_master_addr_by_name(master)
        return ((str_if_bytes(addr[0]), addr[1]), 0, False) if addr else None
    except redis.RedisError:
        return None  # no answer (a timeout, a refused connection): not asked again
    finally:
        await s.connection_pool.disconnect()


class _Streams:
    """XADD (confirmed by WAIT when the policy asks), and blocking reads."""

    def __init__(self, r: Any, wait: redisurl.WaitPolicy, maxlen: int) -> None:
        self.r, self.wait, self.maxlen = r, wait, maxlen

    async def last_id(self, stream: str) -> str:
        msgs = await self.r.xrevrange(stream, "+", "-", count=1)
        return msgs[0][0] if msgs else "0-0"

    async def add(self, stream: str, doc: types.Document, redo: Optional[Callable[[Any], Any]] = None) -> str:
        """Adds doc; with WAIT, a write the primary reached after a
        failover lacks is made again there, preceded by redo(pipeline)
        (what else the write needs there: a task's run)."""
        fields = {"data": doc.to_json()}
        if self.wait.replicas <= 0:
            return await self.r.xadd(stream, fields, maxlen=self.maxlen or None, approximate=True)
        for attempt in range(3):
            pipe = self.r.pipeline(transaction=False)
            if attempt > 0 and redo is not None:
                redo(pipe)
            pipe.xadd(stream, fields, maxlen=self.maxlen or None, approximate=True)
            pipe.execute_command("WAIT", self.wait.replicas, self.wait.timeout_ms)
            *_, entry_id, acked = await pipe.execute()
            if acked >= self.wait.replicas:
                return entry_id
            # Short: the primary may be an old one about to be demoted, and
            # redis-py asks the sentinels only when it connects: look on the
            # primary they name by then, and add again on fresh connections.
            await asyncio.sleep(self.wait.timeout_ms / 1000)
            await self.r.connection_pool.disconnect()
            if await self._on_primary(stream, entry_id):
                return entry_id  # kept: no replica in sync, nothing more to wait for
        raise AgentvisorError("UPSTREAM_UNAVAILABLE", f"{stream}: added 3 times, and the primary had none of them when looked for: not confirmed", True)

    async def _on_primary(self, stream: str, entry_id: str) -> bool:
        """Whether the primary has the entry, read where _primary_to_read
        says, again after a backoff while it says not yet."""
        deadline = time.monotonic() + _core.LOOK_TIMEOUT
        back = 0.1
        while (on := await _primary_to_read(self.r, deadline)) is None:
            if time.monotonic() + back > deadline:
                raise redis.ConnectionError(f"no primary to look for {entry_id} of {stream} on within {_core.LOOK_TIMEOUT}s: a sentinel is failing it over, or none answers")
            await asyncio.sleep(back)
            back = min(2 * back, 2.0)
        try:
            return bool(await on.xrange(stream, entry_id, entry_id))
        finally:
            if on is not self.r:
                await on.connection_pool.disconnect()

    async def read(self, streams: dict, block_ms: float, count: int = 100) -> Any:
        return await self.r.xread(streams, count=count, block=max(1, int(block_ms)))


class AsyncTask:
    """A task sent to a worker (see agentvisor.Task), awaited."""

    def __init__(self, client: "AsyncClient", info: SentInfo) -> None:
        self._c = client
        self.info = info

    @property
    def request_id(self) -> str:
        return self.info.request_id

    @property
    def worker_id(self) -> str:
        return self.info.worker_id

    async def events(self, timeout: float = _core.TASK_TIMEOUT) -> AsyncIterator[_core.Event]:
        """Yields the task's progress events and permission requests, then
        its output, and ends; AgentvisorTimeout when it does not come."""
        deadline = time.monotonic() + timeout
        last = self.info.after or "0-0"
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AgentvisorTimeout(f"task {self.request_id}: no output within {timeout}s")
            try:
                res = await self._c._streams.read({self.info.output: last}, min(left * 1000, _core.BLOCK_MS))
            except redis.RedisError as e:
                raise redis_error(e, f"await {self.request_id}") from e
            for _stream, entries in res or []:
                for entry_id, ev in _core.task_events(self.info, entries):
                    last = entry_id
                    if ev is not None:
                        yield ev
                        if ev.type == "output":
                            return

    async def result(self, timeout: float = _core.TASK_TIMEOUT, on_progress: Optional[Callable[[types.Progress], Any]] = None, check: bool = False) -> types.Output:
        """The task's output; check=True raises its error when it failed."""
        async for ev in self.events(timeout):
            if ev.type == "output":
                err = _core.output_error(ev.doc)
                if check and err is not None:
                    raise err
                return ev.doc
            if ev.type == "progress" and on_progress is not None:
                on_progress(ev.doc)
        raise AgentvisorError("INTERNAL_ERROR", "events ended without an output")

    async def cancel(self, reason: str = "") -> None:
        doc = types.Cancel.from_dict({"v": 1, "type": "cancel", "request_id": self.request_id, "reason": reason or None, "timestamp": _core.now()}, code="INVALID_COMMAND")
        await self._c._add(self.info.control_stream, doc, f"cancel {self.request_id}")

    async def message(self, text: str) -> None:
        doc = types.Message.from_dict({"v": 1, "type": "message", "request_id": self.request_id, "text": text}, code="INVALID_COMMAND")
        await self._c._add(self.info.control_stream, doc, f"message to {self.request_id}")

    async def answer_permission(self, permission_id: str, allow: bool, message: str = "") -> None:
        doc = types.PermissionReply.from_dict({"v": 1, "type": "permission_reply", "request_id": self.request_id,
                                               "permission_id": permission_id, "allow": bool(allow), "message": message or None}, code="INVALID_COMMAND")
        await self._c._add(self.info.control_stream, doc, f"answer {permission_id} of {self.request_id}")

    async def allow(self, permission_id: str) -> None:
        await self.answer_permission(permission_id, True)

    async def deny(self, permission_id: str, message: str = "") -> None:
        await self.answer_permission(permission_id, False, message)

    async def answer(self, prompt: str, **fields: Any) -> "AsyncTask":
        return await self._c.send(self.worker_id, prompt, answers=self.request_id, **fields)

    async def run(self) -> _core.Run:
        return await self._c.run(self.request_id)


class AsyncClient:
    """The asyncio form of agentvisor.Client.

        async with AsyncClient.from_env() as c:
            w = await c.create_worker(agent_type="claude")
            task = await c.send(w.worker_id, "Say hello.")
            async for ev in task.events():
                print(ev.type, ev.doc)
    """

    def __init__(self, redis_client: Any, prefix: Optional[str] = None, wait: Optional[redisurl.WaitPolicy] = None, name: Optional[str] = None, command_timeout: float = _core.COMMAND_TIMEOUT, maxlen: Optional[int] = None) -> None:
        self.redis = redis_client
        self.keys = Keys(prefix if prefix is not None else os.environ.get("WORKER_KEY_PREFIX", ""))
        self.wait = wait or redisurl.WaitPolicy()
        self.name = name
        self.command_timeout = command_timeout
        self._streams = _Streams(redis_client, self.wait, _core.stream_maxlen() if maxlen is None else maxlen)

    @classmethod
    def from_url(cls, url: str, prefix: Optional[str] = None, timeout: float = 30.0, **kw: Any) -> "AsyncClient":
        u = redisurl.parse(url)
        kw.setdefault("wait", redisurl.WaitPolicy.from_env(u))
        return cls(redisurl.connect_async(u, timeout), prefix=prefix, **kw)

    @classmethod
    def from_env(cls, **kw: Any) -> "AsyncClient":
        """See Client.from_env."""
        return cls.from_url(_core.default_url(), **kw)

    async def close(self) -> None:
        await self.redis.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def _add(self, stream: str, doc: types.Document, what: str, redo: Optional[Callable[[Any], Any]] = None) -> str:
        try:
            return await self._streams.add(stream, doc, redo)
        except redis.RedisError as e:
            raise redis_error(e, what) from e

    async def _managers_alive(self) -> Optional[bool]:
        """See Client._managers_alive."""
        try:
            ids = await self.redis.smembers(self.keys.managers())
            return bool(ids) and await self.redis.exists(*[self.keys.manager_state(i) for i in ids]) > 0
        except redis.exceptions.NoPermissionError:
            return None
        except redis.RedisError as e:
            raise redis_error(e, "read the managers' presence") from e

    async def command(self, action: str, timeout: Optional[float] = None, **fields: Any) -> types.Reply:
        """See Client.command."""
        timeout = self.command_timeout if timeout is None else timeout
        stream = self.keys.replies(self.name or _core.new_id("client", 6))
        cmd = _core.make_command(action, reply_to=stream, timestamp=_core.now(), deadline=_core.deadline_after(timeout), **fields)
        grace = time.monotonic() + _core.PRESENCE_GRACE
        while await self._managers_alive() is False:
            if time.monotonic() >= grace:
                raise _core.no_manager(self.keys, "the command was not sent")
            await asyncio.sleep(0.2)
        try:
            last = await self._streams.last_id(stream)
        except redis.RedisError as e:
            raise redis_error(e, "reply stream") from e
        entry = await self._add(self.keys.commands(), cmd, "send command")
        deadline = time.monotonic() + timeout + _core.REPLY_GRACE
        look, absent = time.monotonic() + _core.PRESENCE_EVERY, 0
        while (left := deadline - time.monotonic()) > 0:
            try:
                res = await self._streams.read({stream: last}, min(left * 1000, _core.BLOCK_MS))
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
            absent = absent + 1 if await self._managers_alive() is False else 0
            if absent >= 2:
                try:
                    await self.redis.xdel(self.keys.commands(), entry)
                except redis.RedisError:
                    pass
                raise _core.no_manager(self.keys, f"command {cmd.command_id} taken back")
        raise AgentvisorTimeout(f"no reply to {cmd.command_id} within {timeout}s: a manager that reads it now does not carry it out", "COMMAND_EXPIRED")

    async def create_worker(self, spec: Union[types.CommandSpec, dict, None] = None, timeout: Optional[float] = None, **spec_fields: Any) -> types.Worker:
        """See Client.create_worker."""
        spec = spec if spec is not None else spec_fields
        worker = (await self.command("create", spec=spec, timeout=timeout)).worker
        if worker is None:
            raise AgentvisorError("INTERNAL_ERROR", "a create's reply without its worker")
        return worker

    async def delete_worker(self, worker_id: str, timeout: Optional[float] = None) -> None:
        await self.command("delete", worker_id=worker_id, timeout=timeout)

    @contextlib.asynccontextmanager
    async def worker(self, spec: Union[types.CommandSpec, dict, None] = None, timeout: Optional[float] = None, **spec_fields: Any) -> AsyncIterator[types.Worker]:
        """A worker for the block, deleted when it ends: `async with c.worker(agent_type="claude") as w: ...`."""
        w = await self.create_worker(spec, timeout, **spec_fields)
        try:
            yield w
        finally:
            await self.delete_worker(w.worker_id)

    async def pause_worker(self, worker_id: str, timeout: Optional[float] = None) -> Optional[types.Worker]:
        return (await self.command("pause", worker_id=worker_id, timeout=timeout)).worker

    async def unpause_worker(self, worker_id: str, timeout: Optional[float] = None) -> Optional[types.Worker]:
        return (await self.command("unpause", worker_id=worker_id, timeout=timeout)).worker

    async def hibernate_worker(self, worker_id: str, timeout: Optional[float] = None) -> Optional[types.Worker]:
        return (await self.command("hibernate", worker_id=worker_id, timeout=timeout)).worker

    async def list_workers(self, timeout: Optional[float] = None) -> List[types.Worker]:
        return (await self.command("list", timeout=timeout)).workers or []

    async def set_budget(self, project_id: str, limit_usd: float, warn_usd: Optional[float] = None, timeout: Optional[float] = None) -> None:
        budget = {"limit_usd": limit_usd} if warn_usd is None else {"limit_usd": limit_usd, "warn_usd": warn_usd}
        await self.command("set_budget", project_id=project_id, budget=budget, timeout=timeout)

    async def reset_context(self, project_id: str, agent_type: str, timeout: Optional[float] = None) -> None:
        await self.command("reset_context", project_id=project_id, agent_type=agent_type, timeout=timeout)

    async def send(self, worker_id: str, prompt: str, request_id: Optional[str] = None, **task_fields: Any) -> "AsyncTask":
        """See Client.send."""
        task = _core.make_task(prompt, request_id, **task_fields)
        try:
            kind, agent_type = await self.redis.hmget(self.keys.status(worker_id), "kind", "agent_type")
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
            last, _ = await pipe.execute()
        except redis.RedisError as e:
            raise redis_error(e, f"send: output stream of {worker_id} and run {task.request_id}") from e
        info.after = last[0][0] if last else "0-0"
        await self._add(info.input, task, f"send: task {task.request_id} to {worker_id}", make_run)
        return AsyncTask(self, info)

    async def run_task(self, worker_id: str, prompt: str, timeout: float = _core.TASK_TIMEOUT, on_progress: Optional[Callable[[types.Progress], Any]] = None, check: bool = False, **task_fields: Any) -> types.Output:
        return await (await self.send(worker_id, prompt, **task_fields)).result(timeout, on_progress, check)

    def task(self, worker_id: str, request_id: str, after: str = "0-0", kind: str = "long_lived") -> "AsyncTask":
        return AsyncTask(self, SentInfo(request_id, worker_id, self.keys.input(worker_id, kind), self.keys.output(worker_id, kind), after))

    async def worker_status(self, worker_id: str) -> _core.WorkerStatus:
        try:
            pipe = self.redis.pipeline(transaction=False)
            pipe.hgetall(self.keys.status(worker_id))
            pipe.get(self.keys.heartbeat(worker_id))
            h, beat = await pipe.execute()
        except redis.RedisError as e:
            raise redis_error(e, f"status of {worker_id}") from e
        return _core.worker_status(worker_id, h, beat)

    async def workers(self) -> List[str]:
        """The ids of every worker, sorted (see Client.workers)."""
        try:
            ids = set(await self.redis.smembers(self.keys.workers()))
            for host in await self.redis.smembers(self.keys.hibernated_hosts()):
                ids |= set(await self.redis.smembers(self.keys.hibernated(host)))
            return sorted(ids)
        except redis.RedisError as e:
            raise redis_error(e, "workers") from e

    async def run(self, request_id: str) -> _core.Run:
        try:
            return _core.run_of(request_id, await self.redis.hgetall(self.keys.run(request_id)))
        except redis.RedisError as e:
            raise redis_error(e, f"run {request_id}") from e

    async def budget(self, project_id: str) -> _core.Budget:
        try:
            pipe = self.redis.pipeline(transaction=False)
            pipe.hmget(self.keys.budget(project_id), "limit_usd", "warn_usd")
            pipe.hget(self.keys.usage_project(project_id), "cost_usd")
            (limit, warn), spent = await pipe.execute()
        except redis.RedisError as e:
            raise redis_error(e, f"budget of {project_id}") from e
        return _core.budget_of(project_id, limit, warn, spent)

    async def usage(self, project_id: str) -> _core.Usage:
        """A project's usage counters (zeros when it has none)."""
        try:
            return _core.usage_of(project_id, await self.redis.hgetall(self.keys.usage_project(project_id)))
        except redis.RedisError as e:
            raise redis_error(e, f"usage of {project_id}") from e

    async def lifecycle(self, from_start: bool = False, timeout: Optional[float] = None) -> AsyncIterator[_core.Event]:
        """Yields the lifecycle stream's events as they come (see Client.lifecycle)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        stream = self.keys.lifecycle()
        try:
            last = "0-0" if from_start else await self._streams.last_id(stream)
            while deadline is None or (left := deadline - time.monotonic()) > 0:
                block = _core.BLOCK_MS if deadline is None else min(left * 1000, _core.BLOCK_MS)
                for _s, entries in await self._streams.read({stream: last}, block) or []:
                    for entry_id, fields in entries:
                        last = entry_id
                        yield _core.decode_event(stream, entry_id, fields)
        except redis.RedisError as e:
            raise redis_error(e, "lifecycle") from e
