"""The primary a look for an entry reads after a short WAIT
(_primary_to_read, of both clients) across a failover: from the promotion
of the replica to the end of the failover the old primary still takes
writes, and drops them when it is demoted, while most sentinels still name
it. TestPythonClientSentinelLook in examples/ starts a Redis Sentinel
deployment and runs this with SENTINEL_URL (named so that the unit run
leaves it out)."""

import asyncio
import os
import threading
import time
import unittest

import redis

from agentvisor import aio, client, redisurl


def _server(addr, password):
    host, port = addr.rsplit(":", 1)
    return redis.Redis(host=host, port=int(port), password=password or None, decode_responses=True, socket_timeout=5)


def _addr(on):
    kw = on.connection_pool.connection_kwargs
    return f"{kw['host']}:{kw['port']}"


class LookAcrossFailoverTest(unittest.IsolatedAsyncioTestCase):
    async def test_the_look_never_reads_the_old_primary_after_a_promotion(self):
        url = os.environ.get("SENTINEL_URL")
        self.assertTrue(url, "SENTINEL_URL is not set: go test -run TestPythonClientSentinelLook ./examples/ starts a Sentinel deployment")
        u = redisurl.parse(url)
        sync_r, async_r = redisurl.connect(u, 5.0), redisurl.connect_async(u, 5.0)

        async def named():
            """What each client's helper names now: an address, or None."""
            out = {}
            on = client._primary_to_read(sync_r)
            if on is not None:
                out["sync"] = _addr(on)
                on.connection_pool.disconnect()
            else:
                out["sync"] = None
            on = await aio._primary_to_read(async_r)
            if on is not None:
                out["asyncio"] = _addr(on)
                await on.connection_pool.disconnect()
            else:
                out["asyncio"] = None
            return out

        old = (await named())["sync"]
        self.assertIsNotNone(old, "the sentinels name no primary before the failover")
        role = _server(old, u.password).execute_command("ROLE")
        self.assertEqual(role[0], "master")
        self.assertTrue(role[2], f"the primary {old} has no replica: {role}")
        replica = f"{role[2][0][0]}:{role[2][0][1]}"

        promoted, stop = threading.Event(), threading.Event()

        def watch():
            r = _server(replica, u.password)
            while not stop.is_set() and not promoted.is_set():
                try:
                    if r.execute_command("ROLE")[0] == "master":
                        promoted.set()
                except redis.RedisError:
                    pass
                time.sleep(0.002)

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            host, port = u.addrs[0]
            redis.Redis(host=host, port=port, password=u.sentinel_password or None).execute_command("SENTINEL", "FAILOVER", u.master)
            refused = {"sync": 0, "asyncio": 0}
            wrong = {"sync": 0, "asyncio": 0}
            last = {"sync": old, "asyncio": old}
            deadline = time.monotonic() + 30
            while any(a != replica for a in last.values()):
                self.assertLess(time.monotonic(), deadline, f"the new primary {replica} named within 30 s (last {last}, wrong {wrong}, refused {refused})")
                after = promoted.is_set()
                for which, a in (await named()).items():
                    if a is None:
                        refused[which] += 1
                    elif a == old and after:
                        wrong[which] += 1
                    if a is not None:
                        last[which] = a
                await asyncio.sleep(0.005)
            print(f"the new primary named; looks refused while the sentinels failed over: {refused}", flush=True)
            self.assertEqual(wrong, {"sync": 0, "asyncio": 0}, f"the old primary {old} named after its replica's promotion")
            self.assertTrue(promoted.is_set(), "the watcher saw the replica promoted")
            for which, n in refused.items():
                self.assertGreater(n, 0, f"{which}: no look was refused during the failover: the test saw none of it")
        finally:
            stop.set()
            watcher.join()
            sync_r.close()
            await async_r.close()


if __name__ == "__main__":
    unittest.main()
