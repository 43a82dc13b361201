"""A look's questions to the sentinels, against stand-in sentinels on
loopback: one that accepts and never replies, one whose user may not run
SENTINEL MASTER, one that answers it."""

import asyncio
import os
import socketserver
import sys
import threading
import time
import unittest
from unittest import mock

import redis
import redis.asyncio.sentinel
import redis.sentinel

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from agentvisor import _core, aio, client  # noqa: E402
from agentvisor.client import _Streams  # noqa: E402

PRIMARY = ("10.0.0.2", 6379)


def bulk(s):
    return b"$%d\r\n%s\r\n" % (len(s), s.encode())


def array(items):
    return b"*%d\r\n" % len(items) + b"".join(bulk(str(i)) for i in items)


class StandIn(socketserver.ThreadingTCPServer):
    """A sentinel on a free loopback port that speaks RESP as mode says:
    "hang" reads commands and never replies, "noperm" refuses SENTINEL
    MASTER with an error reply, "answer" names primary (PRIMARY unless
    given) under epoch 3."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, mode, primary=PRIMARY):
        self.mode, self.primary = mode, primary
        super().__init__(("127.0.0.1", 0), _Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def addr(self):
        return self.server_address

    def stop(self):
        self.shutdown()
        self.server_close()


class _Handler(socketserver.StreamRequestHandler):
    def handle(self):
        while (head := self.rfile.readline()).startswith(b"*"):
            args = []
            for _ in range(int(head[1:])):
                n = int(self.rfile.readline()[1:])
                args.append(self.rfile.read(n + 2)[:-2].decode().upper())
            reply = self.reply(args)
            if reply is not None:
                self.wfile.write(reply)

    def reply(self, args):
        mode = self.server.mode
        if mode == "hang":
            return None
        if args[:2] == ["SENTINEL", "MASTER"]:
            if mode == "noperm":
                return b"-NOPERM this user has no permissions to run the 'sentinel|master' command\r\n"
            p = self.server.primary
            return array(["name", "m", "ip", p[0], "port", p[1], "flags", "master", "config-epoch", 3])
        if args[:2] == ["SENTINEL", "GET-MASTER-ADDR-BY-NAME"]:
            return array(self.server.primary)
        return b"-ERR unknown command\r\n"


# The sentinel clients' own socket timeout: a look that waits on it (twice,
# falling back after a timeout) takes 10 s, not the bound the tests check.
SOCKET_TIMEOUT = 5.0


class LookTest(unittest.TestCase):
    def setUp(self):
        self.servers = []

    def tearDown(self):
        for s in self.servers:
            s.stop()

    def sentinels(self, *modes):
        self.servers += [StandIn(m) for m in modes]
        return [s.addr for s in self.servers[-len(modes):]]

    def sync_client(self, addrs):
        return redis.sentinel.Sentinel(addrs, sentinel_kwargs={"socket_timeout": SOCKET_TIMEOUT}).master_for("m")

    def async_client(self, addrs):
        return redis.asyncio.sentinel.Sentinel(addrs, sentinel_kwargs={"socket_timeout": SOCKET_TIMEOUT}).master_for("m")

    def test_the_primary_read_and_how_long_the_sentinels_are_waited_on(self):
        cases = [
            ("a hung sentinel is waited on once, for the look's timeout", ["hang"], None),
            ("hung sentinels are waited on at once", ["hang", "hang", "hang"], None),
            ("an answer beside a hung sentinel", ["hang", "answer"], PRIMARY),
            ("a user not allowed SENTINEL MASTER gets the address alone", ["noperm"], PRIMARY),
        ]
        timeout = 2.0  # a sentinel waited on twice, or one after another, takes 4 s or more
        for name, modes, want in cases:
            addrs = self.sentinels(*modes)
            with self.subTest(name, form="sync"):
                start = time.monotonic()
                on = client._primary_to_read(self.sync_client(addrs), start + timeout)
                took = time.monotonic() - start
                self.assertEqual(on and (on.connection_pool.connection_kwargs["host"], on.connection_pool.connection_kwargs["port"]), want)
                self.assertLess(took, 1.5 * timeout)
            with self.subTest(name, form="asyncio"):
                start = time.monotonic()
                on = asyncio.run(aio._primary_to_read(self.async_client(addrs), start + timeout))
                took = time.monotonic() - start
                self.assertEqual(on and (on.connection_pool.connection_kwargs["host"], on.connection_pool.connection_kwargs["port"]), want)
                self.assertLess(took, 1.5 * timeout)

    def test_a_look_gives_up_within_look_timeout(self):
        """A WAIT answered short, then hung sentinels: the add fails within
        LOOK_TIMEOUT and the WAIT timeout, not after the socket timeouts."""
        addrs = self.sentinels("hang", "hang")
        with mock.patch.object(_core, "LOOK_TIMEOUT", 2.0):
            start = time.monotonic()
            with self.assertRaises(redis.ConnectionError):
                _Streams(self.sync_client(addrs), None, 0)._on_primary("s", "1-0")
            self.assertLess(time.monotonic() - start, 4.0)

            async def look():
                await aio._Streams(self.async_client(addrs), None, 0)._on_primary("s", "1-0")
            start = time.monotonic()
            with self.assertRaises(redis.ConnectionError):
                asyncio.run(look())
            self.assertLess(time.monotonic() - start, 4.0)

    def test_a_hung_primary_ends_the_look_within_look_timeout(self):
        """The sentinels name a primary that accepts and never replies (the
        data client has no socket timeout): the look fails within
        LOOK_TIMEOUT, not never."""
        primary = StandIn("hang")
        sentinel = StandIn("answer", primary.addr)
        self.servers += [primary, sentinel]
        plain = lambda addrs: redis.sentinel.Sentinel(addrs, sentinel_kwargs={"socket_timeout": SOCKET_TIMEOUT}).master_for("m")  # noqa: E731
        with mock.patch.object(_core, "LOOK_TIMEOUT", 2.0):
            r = plain([sentinel.addr])
            self.assertIsNone(r.connection_pool.connection_kwargs.get("socket_timeout"))
            start = time.monotonic()
            with self.assertRaises(redis.RedisError):
                _Streams(r, None, 0)._on_primary("s", "1-0")
            self.assertLess(time.monotonic() - start, 4.0)

            async def look():
                ar = redis.asyncio.sentinel.Sentinel([sentinel.addr], sentinel_kwargs={"socket_timeout": SOCKET_TIMEOUT}).master_for("m")
                await aio._Streams(ar, None, 0)._on_primary("s", "1-0")
            start = time.monotonic()
            with self.assertRaises(redis.RedisError):
                asyncio.run(look())
            self.assertLess(time.monotonic() - start, 4.0)

    def test_the_read_waits_what_is_left_once_the_sentinels_answered(self):
        """A hung sentinel beside one that names a hung primary: the wait on
        the sentinel comes out of the look's time, and the read on the
        primary gets only what is left of it."""
        primary = StandIn("hang")
        hung, sentinel = StandIn("hang"), StandIn("answer", primary.addr)
        self.servers += [primary, hung, sentinel]
        look = 2.0
        with mock.patch.object(_core, "LOOK_TIMEOUT", look), mock.patch.object(_core, "SENTINEL_TIMEOUT", 1.0):
            r = self.sync_client([hung.addr, sentinel.addr])
            start = time.monotonic()
            with self.assertRaises(redis.RedisError):
                _Streams(r, None, 0)._on_primary("s", "1-0")
            self.assertLess(time.monotonic() - start, look + 0.5)

            async def on_primary():
                await aio._Streams(self.async_client([hung.addr, sentinel.addr]), None, 0)._on_primary("s", "1-0")
            start = time.monotonic()
            with self.assertRaises(redis.RedisError):
                asyncio.run(on_primary())
            self.assertLess(time.monotonic() - start, look + 0.5)


if __name__ == "__main__":
    unittest.main()
