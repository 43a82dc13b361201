"""The client's own logic, without Redis: key names, URLs, the documents
it writes, how it reads replies and outputs, its errors and timeouts."""

import asyncio
import json
import os
import sys
import time
import unittest

import redis
import redis.asyncio

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from agentvisor import (AgentvisorError, AgentvisorTimeout, AsyncClient, BadRedisURL, Client, Keys,  # noqa: E402
                        WaitPolicy, _core, aio, client, parse_redis_url)


class KeysTest(unittest.TestCase):
    def test_names_follow_the_protocol(self):
        k = Keys("staging:worker")
        self.assertEqual(k.commands(), "staging:worker:commands")
        self.assertEqual(k.input("w1"), "staging:worker:w1:input")
        self.assertEqual(k.output("w1"), "staging:worker:w1:output")
        self.assertEqual(k.input("w1", "developer"), "staging:worker:developer:input")
        self.assertEqual(k.output("w1", "developer"), "staging:worker:developer:output")
        self.assertEqual(k.input("w1", "developer", "high"), "staging:worker:developer:input:high")
        self.assertEqual(k.input("w1", "developer", "normal"), "staging:worker:developer:input")
        self.assertEqual(k.input("w1", "developer", "low"), "staging:worker:developer:input:low")
        self.assertEqual(k.input("w1", "long_lived", "high"), "staging:worker:w1:input")  # a long-lived worker has one input
        self.assertEqual(k.developer_inputs(), ["staging:worker:developer:input:high", "staging:worker:developer:input",
                                                "staging:worker:developer:input:low"])
        with self.assertRaises(AgentvisorError) as cm:
            k.developer_input("urgent")
        self.assertEqual(cm.exception.code, "INVALID_TASK")
        self.assertEqual(k.run("r1"), "staging:worker:run:r1")
        self.assertEqual(k.status("w1"), "staging:worker:status:w1")
        self.assertEqual(k.budget("p"), "staging:worker:budget:project:p")
        self.assertEqual(k.replies("me"), "staging:worker:replies:me")
        self.assertEqual(Keys("").lifecycle(), "worker:lifecycle")

    def test_bad_prefix(self):
        for p in ("a b", "x:", ":x", "{x}"):
            with self.assertRaises(AgentvisorError):
                Keys(p)


class RedisURLTest(unittest.TestCase):
    def test_forms(self):
        u = parse_redis_url("redis://:pw@127.0.0.1:6390/3")
        self.assertEqual((u.sentinel, u.tls, u.addrs, u.db, u.username, u.password), (False, False, [("127.0.0.1", 6390)], 3, "", "pw"))
        u = parse_redis_url("rediss://user:p%3Aw%40@example.com")
        self.assertEqual((u.tls, u.addrs, u.username, u.password), (True, [("example.com", 6379)], "user", "p:w@"))
        u = parse_redis_url("REDIS+SENTINEL://app:pw@s1,s2:26380,[::1]/mymaster/1?sentinel_username=su&sentinel_password=sp")
        self.assertEqual((u.sentinel, u.master, u.db), (True, "mymaster", 1))
        self.assertEqual(u.addrs, [("s1", 26379), ("s2", 26380), ("::1", 26379)])
        self.assertEqual((u.username, u.password, u.sentinel_username, u.sentinel_password), ("app", "pw", "su", "sp"))
        u = parse_redis_url("rediss+sentinel://s1/m")
        self.assertEqual((u.sentinel, u.tls, u.master, u.db), (True, True, "m", 0))

    def test_refused_without_quoting_the_password(self):
        for bad in ("http://h", "redis://:secretpw@h:99999", "redis://:secretpw@a,b", "redis+sentinel://:secretpw@h",
                    "redis://:secretpw@h/x", "redis://:secretpw@h/1#f", "redis://:secretpw@h?sentinel_password=x",
                    "redis+sentinel://:secretpw@h/m/0/1", "redis+sentinel://:secretpw@h/m?other=1", "noscheme"):
            with self.subTest(url=bad):
                with self.assertRaises(BadRedisURL) as cm:
                    parse_redis_url(bad)
                self.assertNotIn("secretpw", str(cm.exception))

    def test_wait_policy(self):
        self.assertEqual(WaitPolicy.from_env(parse_redis_url("redis://h"), {}).replicas, 0)
        p = WaitPolicy.from_env(parse_redis_url("redis+sentinel://h/m"), {})
        self.assertEqual((p.replicas, p.timeout_ms), (1, 500))
        p = WaitPolicy.from_env(parse_redis_url("redis://h"), {"REDIS_WAIT_REPLICAS": "2", "REDIS_WAIT_TIMEOUT": "1.5s"})
        self.assertEqual((p.replicas, p.timeout_ms), (2, 1500))
        self.assertEqual(WaitPolicy.from_env(parse_redis_url("redis://h"), {"REDIS_WAIT_TIMEOUT": "250"}).timeout_ms, 250)
        with self.assertRaises(BadRedisURL):
            WaitPolicy.from_env(parse_redis_url("redis://h"), {"REDIS_WAIT_TIMEOUT": "2m"})

    def test_named_primary(self):
        old, new = ("10.0.0.1", 6379), ("10.0.0.2", 6379)
        cases = [
            ("the newest epoch, although most name the old one", [(old, 1, False), (old, 1, False), (new, 2, False)], new),
            ("most among equal epochs", [(new, 1, False), (old, 1, False), (old, 1, False)], old),
            ("the lowest address among equals", [(new, 1, False), (old, 1, False)], old),
            ("a sentinel failing the master over: not yet", [(old, 1, True), (old, 1, False), None], None),
            ("an address alone (no SENTINEL MASTER) under epoch 0", [(new, 0, False), None, None], new),
            ("no answer: not yet", [None, None, None], None),
        ]
        for name, answers, want in cases:
            with self.subTest(name):
                self.assertEqual(_core.named_primary(answers), want)

    def test_a_client_of_one_server_looks_on_itself(self):
        r = redis.Redis(host="127.0.0.1", port=1)
        self.assertIs(client._primary_to_read(r), r)
        ar = redis.asyncio.Redis(host="127.0.0.1", port=1)
        self.assertIs(asyncio.run(aio._primary_to_read(ar)), ar)


class FakeRedis:
    """Enough of redis-py for the client: streams as lists, hashes, and
    a manager that answers every command on its reply_to."""

    def __init__(self, answer=None, managers=("m1",)):
        self.streams, self.hashes, self.answer = {}, {}, answer
        self.seq = 0
        # Managers alive: each one's id in the set, and its state hash.
        self.sets = {"p:managers": set(managers)}
        self.alive = set(f"p:manager:{m}" for m in managers)

    def smembers(self, key):
        return set(self.sets.get(key, set()))

    def exists(self, *keys):
        return sum(1 for k in keys if k in self.alive or k in self.hashes)

    def xdel(self, stream, *ids):
        before = len(self.streams.get(stream, []))
        self.streams[stream] = [e for e in self.streams.get(stream, []) if e[0] not in ids]
        return before - len(self.streams[stream])

    def xrevrange(self, stream, hi, lo, count=None):
        return list(reversed(self.streams.get(stream, [])))[:count]

    def xrange(self, stream, lo, hi):
        return [e for e in self.streams.get(stream, []) if e[0] == lo]

    def xadd(self, stream, fields, maxlen=None, approximate=True):
        self.seq += 1
        entry_id = f"{self.seq}-0"
        self.streams.setdefault(stream, []).append((entry_id, dict(fields)))
        if stream.endswith(":commands") and self.answer:
            cmd = json.loads(fields["data"])
            reply = self.answer(cmd)
            if reply is not None:
                self.xadd(cmd["reply_to"], {"data": json.dumps(reply)})
        return entry_id

    def xread(self, streams, count=None, block=None):
        out = []
        for s, last in streams.items():
            entries = [e for e in self.streams.get(s, []) if _after(e[0], last)]
            if entries:
                out.append((s, entries[:count]))
        return out

    def hget(self, key, field):
        return self.hashes.get(key, {}).get(field)

    def hmget(self, key, *fields):
        return [self.hashes.get(key, {}).get(f) for f in fields]

    def hgetall(self, key):
        return dict(self.hashes.get(key, {}))

    def pipeline(self, transaction=False):
        return FakePipe(self)

    def close(self):
        pass


def _after(entry_id, last):
    return tuple(map(int, entry_id.split("-"))) > tuple(map(int, last.split("-")))


class FakePipe:
    def __init__(self, r):
        self.r, self.calls = r, []

    def __getattr__(self, name):
        return lambda *a, **kw: self.calls.append((name, a, kw))

    def execute(self):
        out = []
        for name, a, kw in self.calls:
            if name == "eval":
                _script, _n, key, *args = a
                if key not in self.r.hashes:
                    self.r.hashes[key] = dict(zip(args[::2], args[1::2]))
                out.append(1)
            else:
                out.append(getattr(self.r, name)(*a, **kw))
        return out


def reply_to(cmd, **fields):
    return {"v": 1, "type": "reply", "command_id": cmd["command_id"], "action": cmd["action"], "timestamp": "2026-11-21T09:28:01Z", **fields}


class CommandTest(unittest.TestCase):
    def test_a_reply_is_matched_by_command_id(self):
        def answer(cmd):
            self.assertTrue(cmd["reply_to"].startswith("p:replies:client-"))
            return reply_to(cmd, ok=True, worker_id="w1", worker={"worker_id": "w1", "status": "running"})
        r = FakeRedis(answer)
        # Another command's reply already waits on the stream: ignored.
        r.streams["p:replies:me"] = [("0-1", {"data": json.dumps({"v": 1, "type": "reply", "command_id": "other", "action": "x", "ok": True, "timestamp": "2026-11-21T09:28:01Z"})})]
        c = Client(r, prefix="p")
        w = c.create_worker(agent_type="claude", project_id="proj")
        self.assertEqual((w.worker_id, w.status), ("w1", "running"))
        sent = json.loads(r.streams["p:commands"][0][1]["data"])
        self.assertEqual(sent["spec"], {"agent_type": "claude", "project_id": "proj"})

    def test_a_failed_reply_raises_its_code(self):
        r = FakeRedis(lambda cmd: reply_to(cmd, ok=False, error={"code": "RESOURCE_EXHAUSTED", "message": "no slot", "retryable": True}))
        with self.assertRaises(AgentvisorError) as cm:
            Client(r, prefix="p").create_worker(agent_type="claude")
        self.assertEqual((cm.exception.code, cm.exception.retryable, cm.exception.message), ("RESOURCE_EXHAUSTED", True, "no slot"))
        self.assertFalse(cm.exception.reply.ok)

    def test_no_reply_times_out(self):
        r = FakeRedis(lambda cmd: None)
        with self.assertRaises(AgentvisorTimeout) as cm:
            Client(r, prefix="p").delete_worker("w1", timeout=0.05)
        self.assertEqual(cm.exception.code, "COMMAND_EXPIRED")
        self.assertIsInstance(cm.exception, TimeoutError)
        # The command carried its deadline: no manager carries it out later.
        self.assertIn("deadline", json.loads(r.streams["p:commands"][0][1]["data"]))

    def test_no_manager_alive_is_not_sent(self):
        r = FakeRedis(lambda cmd: reply_to(cmd, ok=True), managers=())
        r.sets["p:managers"] = {"dead"}  # its state hash expired
        start = time.monotonic()
        with self.assertRaises(AgentvisorError) as cm:
            Client(r, prefix="p").create_worker(agent_type="claude")
        self.assertEqual((cm.exception.code, cm.exception.retryable), ("NO_MANAGER", True))
        self.assertLess(time.monotonic() - start, 4)
        self.assertNotIn("p:commands", r.streams)

    def test_a_scoped_worker_is_deleted_when_the_block_ends(self):
        seen = []

        def answer(cmd):
            seen.append(cmd["action"])
            return reply_to(cmd, ok=True, worker_id="w1", worker={"worker_id": "w1", "status": "running"})
        c = Client(FakeRedis(answer), prefix="p")
        with self.assertRaises(RuntimeError):
            with c.worker(agent_type="claude") as w:
                self.assertEqual(w.worker_id, "w1")
                raise RuntimeError("the block fails")
        self.assertEqual(seen, ["create", "delete"])

    def test_a_malformed_command_is_not_sent(self):
        r = FakeRedis()
        with self.assertRaises(AgentvisorError) as cm:
            Client(r, prefix="p").create_worker(agent_type="claude", allowed_commands=["Eng*"])
        self.assertEqual(cm.exception.code, "INVALID_COMMAND")
        self.assertNotIn("p:commands", r.streams)

    def test_set_budget(self):
        seen = []
        r = FakeRedis(lambda cmd: seen.append(cmd) or reply_to(cmd, ok=True))
        Client(r, prefix="p").set_budget("shop", 50, 40)
        self.assertEqual((seen[0]["action"], seen[0]["project_id"], seen[0]["budget"]), ("set_budget", "shop", {"limit_usd": 50, "warn_usd": 40}))


def output(request_id, status="complete", **kw):
    return {"v": 1, "type": "output", "request_id": request_id, "worker_id": "w1", "status": status,
            "usage": {"input": 1, "output": 1, "cache_read": 0, "cache_creation": 0},
            "context_tokens": 0, "cost_usd": 0, "duration_ms": 1, "timestamp": "2026-11-21T09:30:00Z", **kw}


def progress(request_id, step):
    return {"v": 1, "type": "progress", "worker_id": "w1", "request_id": request_id, "step": step, "timestamp": "2026-11-21T09:30:00Z"}


class TaskTest(unittest.TestCase):
    def setUp(self):
        self.r = FakeRedis()
        self.r.hashes["p:status:w1"] = {"kind": "long_lived", "status": "idle", "agent_type": "claude"}
        # An output of an earlier task: before the send, never this task's.
        self.r.xadd("p:w1:output", {"data": json.dumps(output("r1", result={"old": True}))})
        self.c = Client(self.r, prefix="p")

    def test_send_makes_the_run_and_reads_after_the_last_output(self):
        t = self.c.send("w1", "hello", request_id="r1", task_id="T-1", trigger="cron", retry={"attempts": 2})
        run = self.c.run("r1")
        self.assertEqual((run.status, run.get("worker_id"), run.get("task_id"), run.get("project_id")), ("requested", "w1", "T-1", "default"))
        self.assertEqual((run.get("agent_slug"), run.get("trigger")), ("claude", "cron"))
        self.assertEqual(t.info.after, "1-0")
        task = json.loads(self.r.streams["p:w1:input"][0][1]["data"])
        self.assertEqual(task, {"v": 1, "type": "task", "request_id": "r1", "prompt": "hello", "task_id": "T-1",
                                "trigger": "cron", "retry": {"attempts": 2}})
        for doc in (progress("other", "not mine"), progress("r1", "Step 1"), output("r1", result={"new": True}), progress("r1", "after")):
            self.r.xadd("p:w1:output", {"data": json.dumps(doc)})
        seen = [(ev.type, getattr(ev.doc, "step", None)) for ev in t.events(timeout=1)]
        self.assertEqual(seen, [("progress", "Step 1"), ("output", None)])
        self.assertEqual(t.result(timeout=1).result, {"new": True})

    def test_an_existing_run_is_left_as_it_is(self):
        self.r.hashes["p:run:r2"] = {"status": "running"}
        self.c.send("w1", "hello", request_id="r2")
        self.assertEqual(self.c.run("r2").status, "running")

    def test_unknown_worker_and_bad_task(self):
        with self.assertRaises(AgentvisorError) as cm:
            self.c.send("nope", "hello")
        self.assertEqual(cm.exception.code, "NOT_FOUND")
        with self.assertRaises(AgentvisorError) as cm:
            self.c.send("w1", "hello", timeout_seconds=-1)
        self.assertEqual(cm.exception.code, "INVALID_TASK")
        with self.assertRaises(AgentvisorError) as cm:
            self.c.run("nope")
        self.assertEqual(cm.exception.code, "NOT_FOUND")

    def test_a_failed_output_raises_when_checked(self):
        t = self.c.send("w1", "hello", request_id="r3")
        self.r.xadd("p:w1:output", {"data": json.dumps(output("r3", "cancelled", error={"code": "CANCELLED", "message": "cancelled while running", "retryable": False}))})
        self.assertEqual(t.result(timeout=1).status, "cancelled")
        with self.assertRaises(AgentvisorError) as cm:
            t.result(timeout=1, check=True)
        self.assertEqual((cm.exception.code, cm.exception.retryable), ("CANCELLED", False))

    def test_no_output_times_out(self):
        t = self.c.send("w1", "hello", request_id="r4")
        with self.assertRaises(AgentvisorTimeout):
            t.result(timeout=0.05)

    def test_cancel_message_and_permission_documents(self):
        t = self.c.send("w1", "hello", request_id="r5")
        t.cancel("changed my mind")
        t.message("use staging")
        t.deny("perm-1", "not here")
        t.allow("perm-2")
        docs = [json.loads(f["data"]) for _, f in self.r.streams["p:w1:input"][1:]]
        self.assertEqual([d["type"] for d in docs], ["cancel", "message", "permission_reply", "permission_reply"])
        self.assertEqual(docs[0]["reason"], "changed my mind")
        self.assertEqual((docs[2]["allow"], docs[2]["message"], docs[3]["allow"]), (False, "not here", True))
        with self.assertRaises(AgentvisorError):
            t.message("")

    def test_a_broken_entry_is_an_event_with_its_error(self):
        ev = _core.decode_event("s", "1-0", {"data": "{not json"})
        self.assertIsNotNone(ev.error)
        ev = _core.decode_event("s", "1-0", {"data": json.dumps({"v": 1, "type": "lifecycle", "worker_id": "w1", "event": "exploded"})})
        self.assertIsNotNone(ev.error)
        self.assertIsNone(ev.doc)


class DeveloperPriorityTest(unittest.TestCase):
    def setUp(self):
        self.r = FakeRedis()
        self.r.hashes["p:status:d1"] = {"kind": "developer", "status": "idle", "agent_type": "claude"}
        self.r.hashes["p:status:w1"] = {"kind": "long_lived", "status": "idle", "agent_type": "claude"}
        self.c = Client(self.r, prefix="p")

    def types_on(self, stream):
        return [json.loads(f["data"])["type"] for _, f in self.r.streams.get(stream, [])]

    def test_a_developer_task_goes_to_its_prioritys_queue(self):
        for rid, prio, stream in (("r1", "high", "p:developer:input:high"), ("r2", "low", "p:developer:input:low"),
                                  ("r3", "normal", "p:developer:input"), ("r4", None, "p:developer:input")):
            with self.subTest(priority=prio):
                t = self.c.send("d1", "hello", request_id=rid, priority=prio)
                self.assertEqual((t.info.input, t.info.control_stream, t.info.output), (stream, "p:developer:input", "p:developer:output"))
                ids = [json.loads(f["data"])["request_id"] for _, f in self.r.streams[stream]]
                self.assertIn(rid, ids)
        self.assertEqual(json.loads(self.r.streams["p:developer:input:high"][0][1]["data"])["priority"], "high")
        self.assertEqual(self.c.run("r1").get("worker_id"), "")

    def test_control_documents_of_a_developer_task_go_to_the_normal_queue(self):
        t = self.c.send("d1", "hello", request_id="r5", priority="high")
        t.cancel("changed my mind")
        t.message("use staging")
        t.deny("perm-1", "not here")
        t.allow("perm-2")
        self.assertEqual(self.types_on("p:developer:input:high"), ["task"])
        self.assertEqual(self.types_on("p:developer:input"), ["cancel", "message", "permission_reply", "permission_reply"])
        # A Task made again from its request id knows the same control queue.
        self.c.task("d1", "r5", kind="developer").cancel()
        self.assertEqual(self.types_on("p:developer:input")[-1], "cancel")

    def test_a_long_lived_worker_ignores_the_priority(self):
        t = self.c.send("w1", "hello", request_id="r6", priority="low")
        t.cancel()
        self.assertEqual((t.info.input, t.info.control_stream), ("p:w1:input", "p:w1:input"))
        self.assertEqual(self.types_on("p:w1:input"), ["task", "cancel"])

    def test_a_bad_priority_is_not_sent(self):
        with self.assertRaises(AgentvisorError) as cm:
            self.c.send("d1", "hello", priority="urgent")
        self.assertEqual(cm.exception.code, "INVALID_TASK")
        self.assertEqual(self.r.streams, {})


class FakeAsyncRedis:
    """FakeRedis, awaited."""

    def __init__(self, sync):
        self.s = sync

    def __getattr__(self, name):
        f = getattr(self.s, name)

        async def call(*a, **kw):
            return f(*a, **kw)
        return call

    def pipeline(self, transaction=False):
        p = self.s.pipeline()

        class Pipe:
            def __getattr__(_, name):
                return getattr(p, name)

            async def execute(_):
                return p.execute()
        return Pipe()


class AsyncTest(unittest.TestCase):
    def test_send_and_async_for_events(self):
        r = FakeRedis()
        r.hashes["p:status:w1"] = {"kind": "developer"}

        async def main():
            c = AsyncClient(FakeAsyncRedis(r), prefix="p")
            t = await c.send("w1", "hello", request_id="r1")
            self.assertEqual((t.info.input, t.info.output), ("p:developer:input", "p:developer:output"))
            self.assertEqual((await c.run("r1")).get("worker_id"), "")  # whichever developer worker reads it
            r.xadd("p:developer:output", {"data": json.dumps(progress("r1", "Step"))})
            r.xadd("p:developer:output", {"data": json.dumps(output("r1"))})
            return [ev.type async for ev in t.events(timeout=1)]
        self.assertEqual(asyncio.run(main()), ["progress", "output"])

    def test_a_priority_picks_the_queue_and_control_goes_to_the_normal_one(self):
        r = FakeRedis()
        r.hashes["p:status:d1"] = {"kind": "developer"}

        async def main():
            c = AsyncClient(FakeAsyncRedis(r), prefix="p")
            t = await c.send("d1", "hello", request_id="r1", priority="low")
            await t.cancel("no")
            await t.message("steer")
            await t.allow("perm-1")
            await t.deny("perm-2")
            return t.info.input
        self.assertEqual(asyncio.run(main()), "p:developer:input:low")
        self.assertEqual([json.loads(f["data"])["type"] for _, f in r.streams["p:developer:input:low"]], ["task"])
        self.assertEqual([json.loads(f["data"])["type"] for _, f in r.streams["p:developer:input"]],
                         ["cancel", "message", "permission_reply", "permission_reply"])


if __name__ == "__main__":
    unittest.main()
