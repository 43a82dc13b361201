"""The client against a real redis-server this suite starts (on a free
loopback port, with a password): errors by cause, and a command with no
manager alive. redis-server must be on PATH (make setup installs it): the
suite fails, not skips, without it."""

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import redis  # noqa: E402

from agentvisor import AgentvisorError, Client  # noqa: E402
from agentvisor import _core  # noqa: E402

PASSWORD = "pw-test"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RealRedisTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        server = shutil.which("redis-server")
        if server is None:
            raise AssertionError("redis-server is not on PATH (make setup installs it)")
        cls.dir = tempfile.TemporaryDirectory()
        cls.port = free_port()
        cls.proc = subprocess.Popen([server, "--port", str(cls.port), "--bind", "127.0.0.1", "--requirepass", PASSWORD,
                                     "--save", "", "--appendonly", "no", "--dir", cls.dir.name],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                redis.Redis(port=cls.port, password=PASSWORD).ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    @classmethod
    def tearDownClass(cls):
        cls.proc.terminate()
        cls.proc.wait(10)
        cls.dir.cleanup()

    def url(self, password=PASSWORD, port=None):
        return f"redis://:{password}@127.0.0.1:{port or self.port}/0"

    def test_errors_by_cause(self):
        cases = [
            ("wrong password", self.url("wrong"), "REDIS_AUTH_FAILED", False, "refused the user or password"),
            ("refused connection", self.url(port=free_port()), "UPSTREAM_UNAVAILABLE", True, "connection refused"),
        ]
        for name, url, code, retryable, says in cases:
            with self.subTest(name):
                with Client.from_url(url, prefix="causes") as c, self.assertRaises(AgentvisorError) as cm:
                    c.list_workers(timeout=2)
                self.assertEqual((cm.exception.code, cm.exception.retryable), (code, retryable), str(cm.exception))
                self.assertIn(says, cm.exception.message)

    def test_no_manager_fails_fast_and_sends_nothing(self):
        r = redis.Redis(port=self.port, password=PASSWORD, decode_responses=True)
        r.sadd("nomgr:managers", "dead")  # a manager whose state hash expired
        with Client.from_url(self.url(), prefix="nomgr") as c:
            start = time.monotonic()
            with self.assertRaises(AgentvisorError) as cm:
                c.create_worker(agent_type="claude")
            took = time.monotonic() - start
        self.assertEqual(cm.exception.code, "NO_MANAGER")
        self.assertLess(took, 4)
        self.assertEqual(r.xlen("nomgr:commands"), 0)

    def test_a_command_carries_its_deadline(self):
        r = redis.Redis(port=self.port, password=PASSWORD, decode_responses=True)
        r.sadd("silent:managers", "m1")
        r.hset("silent:manager:m1", "id", "m1")  # alive, and never answers
        with Client.from_url(self.url(), prefix="silent") as c, self.assertRaises(AgentvisorError) as cm:
            c.delete_worker("w1", timeout=1)
        self.assertEqual(cm.exception.code, "COMMAND_EXPIRED")
        (_, fields), = r.xrange("silent:commands")
        self.assertIn('"deadline"', fields["data"])

    def test_the_credentials_file_when_no_url_is_given(self):
        with tempfile.NamedTemporaryFile("w", suffix=".env") as f:
            f.write(f"# scripts/redis.sh\nREDIS_MANAGER_URL=redis://m\nREDIS_CONSUMER_URL='{self.url()}'\n")
            f.flush()
            self.assertEqual(_core.default_url({}, f.name), self.url())
            self.assertEqual(_core.default_url({"REDIS_URL": "redis://x"}, f.name), "redis://x")
        with self.assertRaises(AgentvisorError) as cm:
            _core.default_url({}, "/nonexistent/credentials.env")
        self.assertEqual(cm.exception.code, "INVALID_COMMAND")
        self.assertIn("REDIS_URL is not set", cm.exception.message)


if __name__ == "__main__":
    unittest.main()
