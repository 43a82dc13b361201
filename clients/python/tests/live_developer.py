"""The client against a live runtime's developer worker.
examples/python_test.go (TestPythonClientDeveloperQueue) starts the runtime
(one whose workers are not persistent: a developer worker cannot be) and
runs this module by name, with REDIS_URL, WORKER_KEY_PREFIX and
STUB_SCRIPT_URL. Its name keeps it out of the unit run (discover finds
test*.py); without that environment it fails."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from agentvisor import AgentvisorError, Client  # noqa: E402
from tests.test_live import final, script, wait_for  # noqa: E402

PROJECT = "pyclient-dev"


class LiveDeveloperQueueTest(unittest.TestCase):
    """A developer worker: a high task, on its own queue, is cancelled
    through the normal queue; a low one runs to its output."""

    @classmethod
    def setUpClass(cls):
        for v in ("REDIS_URL", "WORKER_KEY_PREFIX", "STUB_SCRIPT_URL"):
            if not os.environ.get(v):
                raise RuntimeError(f"{v} is not set: go test -run TestPythonClientDeveloperQueue ./examples/ starts the runtime")
        cls.c = Client.from_env()
        cls.worker = cls.c.create_worker(agent_type="claude", kind="developer", project_id=PROJECT)

    @classmethod
    def tearDownClass(cls):
        try:
            cls.c.delete_worker(cls.worker.worker_id)
        finally:
            cls.c.close()

    def test_priorities_and_control_on_the_developer_queue(self):
        wid = self.worker.worker_id
        script({"text": "Thinking...", "delay_ms": 60000})
        high = self.c.send(wid, "Think long.", project_id=PROJECT, priority="high")
        self.assertEqual((high.info.input, high.info.control_stream), (self.c.keys.developer_input("high"), self.c.keys.developer_input()))
        wait_for(lambda: self.c.run(high.request_id).status == "running", timeout=120)
        high.cancel("not now")
        with self.assertRaises(AgentvisorError) as cm:
            high.result(timeout=60, check=True)
        self.assertEqual(cm.exception.code, "CANCELLED")
        script(final(result={"low": True}))
        low = self.c.send(wid, "Quick.", project_id=PROJECT, priority="low")
        self.assertEqual(low.info.input, self.c.keys.developer_input("low"))
        self.assertEqual(low.result(timeout=180, check=True).result, {"low": True})
        self.assertEqual(self.c.run(low.request_id).get("worker_id"), wid)


if __name__ == "__main__":
    unittest.main()
