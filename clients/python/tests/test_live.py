"""The client against a live runtime. examples/python_test.go
(TestPythonClient) starts one (a worker-manager, real Docker workers
running Claude Code against a stub model) and runs this suite with its
environment: REDIS_URL, WORKER_KEY_PREFIX, STUB_SCRIPT_URL (where a case
gives the stub model its script) and AGENTVISOR_LIVE=1. Without that
environment these cases are skipped, and that Go test fails on a skip."""

import asyncio
import json
import os
import sys
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from agentvisor import AgentvisorError, AgentvisorTimeout, AsyncClient, Client  # noqa: E402

LIVE = os.environ.get("AGENTVISOR_LIVE") == "1"
PROJECT = "pyclient"


def script(*steps):
    """Gives the stub model its answers, in order (stubmodel.Script)."""
    req = urllib.request.Request(os.environ["STUB_SCRIPT_URL"], data=json.dumps({"steps": list(steps)}).encode(), method="POST")
    urllib.request.urlopen(req, timeout=10).close()


def bash(command):
    return {"tool_use": {"name": "Bash", "input": {"command": command, "description": "a step"}}}


def final(status="complete", **kw):
    return {"text": "Done.\n" + json.dumps({"status": status, **kw})}


def wait_for(fn, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if fn():
            return
        time.sleep(0.1)
    raise AssertionError("condition not met in time")


@unittest.skipUnless(LIVE, "needs the live runtime of examples/python_test.go (AGENTVISOR_LIVE=1)")
class LiveTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = Client.from_env()
        cls.worker = cls.c.create_worker(agent_type="claude", project_id=PROJECT, allowed_commands=["worker.progress"])

    @classmethod
    def tearDownClass(cls):
        cls.c.close()

    def test_01_worker_status(self):
        self.assertIn(self.worker.status, ("starting", "running"))
        self.assertIn(self.worker.worker_id, self.c.workers())
        wait_for(lambda: self.c.worker_status(self.worker.worker_id).status in ("idle", "paused"))
        st = self.c.worker_status(self.worker.worker_id)
        self.assertEqual((st.kind, st.hash.get("agent_type"), st.hash.get("project_id")), ("long_lived", "claude", PROJECT))
        with self.assertRaises(AgentvisorError) as cm:
            self.c.worker_status("no-such-worker")
        self.assertEqual(cm.exception.code, "NOT_FOUND")

    def test_02_send_await_progress_and_run(self):
        script(bash('worker-wrapper progress --step "Greeting" --pct 100'), final(result={"greeting": "hello"}))
        task = self.c.send(self.worker.worker_id, "Greet.", project_id=PROJECT, task_id="T-1")
        run = self.c.run(task.request_id)  # exists from the send
        self.assertEqual(run.get("task_id"), "T-1")
        events = list(task.events(timeout=180))
        steps = [(ev.doc.step, ev.doc.progress_pct) for ev in events if ev.type == "progress"]
        self.assertIn(("Greeting", 100), steps)
        out = events[-1].doc
        self.assertEqual((events[-1].type, out.status, out.result, out.task_id), ("output", "complete", {"greeting": "hello"}, "T-1"))
        self.assertGreater(out.usage.input, 0)
        run = self.c.run(task.request_id)
        self.assertEqual((run.status, run.get("worker_id"), run.get("project_id")), ("completed", self.worker.worker_id, PROJECT))
        self.assertTrue(run.terminal)

    def test_03_cancel_a_running_task(self):
        script({"text": "Thinking...", "delay_ms": 60000})
        task = self.c.send(self.worker.worker_id, "Think long.", project_id=PROJECT)
        wait_for(lambda: self.c.run(task.request_id).status == "running")
        with self.assertRaises(AgentvisorTimeout):
            task.result(timeout=0.5)
        task.cancel("the user changed their mind")
        with self.assertRaises(AgentvisorError) as cm:
            task.result(timeout=60, check=True)
        self.assertEqual((cm.exception.code, cm.exception.retryable), ("CANCELLED", False))
        self.assertIn("the user changed their mind", cm.exception.message)
        self.assertEqual(cm.exception.reply.status, "cancelled")
        run = self.c.run(task.request_id)
        self.assertEqual(run.status, "failed")
        self.assertTrue(run.get("error").startswith("CANCELLED"))

    def test_04_message_steers_a_running_task(self):
        script({"text": "Working on it.", "delay_ms": 4000}, final(result={"db": "staging"}), final(result={"db": "staging"}))
        task = self.c.send(self.worker.worker_id, "Migrate.", project_id=PROJECT)
        wait_for(lambda: self.c.run(task.request_id).status == "running")
        task.message("Use the staging database, not production.")
        events = list(task.events(timeout=120))
        said = [ev.doc.step for ev in events if ev.type == "progress"]
        self.assertTrue(any(s.startswith("message ") for s in said), said)
        self.assertEqual(events[-1].doc.status, "complete")

    def test_05_permission_allow_and_deny(self):
        script(bash("touch allowed.txt"), bash("touch denied.txt"), final(result={"asked": 2}))
        task = self.c.send(self.worker.worker_id, "Touch two files.", project_id=PROJECT)
        asked, verdicts = [], []
        for ev in task.events(timeout=180):
            if ev.type == "permission_request":
                asked.append(ev.doc.input["command"])
                if len(asked) == 1:
                    task.allow(ev.doc.permission_id)
                else:
                    task.deny(ev.doc.permission_id, "Not on this branch.")
            elif ev.type == "progress" and ev.doc.step.startswith("permission "):
                verdicts.append(ev.doc.step)
            elif ev.type == "output":
                self.assertEqual(ev.doc.status, "complete")
        self.assertEqual(asked, ["touch allowed.txt", "touch denied.txt"])
        self.assertTrue(verdicts[0].endswith("allowed"), verdicts)
        self.assertIn("denied", verdicts[1])

    def test_06_answer_a_blocked_question(self):
        script(final("blocked", question="Which colour?"), final(result={"colour": "blue"}))
        task = self.c.send(self.worker.worker_id, "Paint it.", project_id=PROJECT)
        out = task.result(timeout=120)
        self.assertEqual((out.status, out.question), ("blocked", "Which colour?"))
        answer = task.answer("Blue.")
        out = answer.result(timeout=120, check=True)
        self.assertEqual((out.status, out.answers, out.result), ("complete", task.request_id, {"colour": "blue"}))

    def test_07_budget(self):
        self.c.set_budget("pyclient-budget", 50, 40)
        b = self.c.budget("pyclient-budget")
        self.assertEqual((b.limit_usd, b.warn_usd, b.spent_usd), (50.0, 40.0, 0.0))
        self.c.set_budget("pyclient-budget", 0)
        self.assertEqual(self.c.budget("pyclient-budget").limit_usd, 0.0)

    def test_08_protocol_errors_surface(self):
        with self.assertRaises(AgentvisorError) as cm:
            self.c.command("status", worker_id="no-such-worker", timeout=30)
        self.assertEqual((cm.exception.code, cm.exception.retryable), ("NOT_FOUND", False))
        self.assertFalse(cm.exception.reply.ok)
        with self.assertRaises(AgentvisorError) as cm:
            self.c.send("no-such-worker", "hello")
        self.assertEqual(cm.exception.code, "NOT_FOUND")

    def test_09_asyncio(self):
        script(bash('worker-wrapper progress --step "Async" --pct 50'), final(result={"async": True}))

        async def main():
            async with AsyncClient.from_env() as c:
                st = await c.worker_status(self.worker.worker_id)
                self.assertEqual(st.hash.get("project_id"), PROJECT)
                task = await c.send(self.worker.worker_id, "Go async.", project_id=PROJECT)
                seen = [ev async for ev in task.events(timeout=120)]
                run = await task.run()
                return seen, run
        seen, run = asyncio.run(main())
        self.assertIn("Async", [ev.doc.step for ev in seen if ev.type == "progress"])
        self.assertEqual((seen[-1].type, seen[-1].doc.result), ("output", {"async": True}))
        self.assertEqual(run.status, "completed")

    def test_10_usage_counts_the_tasks(self):
        u = self.c.usage(PROJECT)
        self.assertGreaterEqual(u.tasks, 6)
        self.assertGreater(u.input, 0)

    def test_99_delete(self):
        self.c.delete_worker(self.worker.worker_id)
        self.assertNotIn(self.worker.worker_id, self.c.workers())
        with self.assertRaises(AgentvisorError) as cm:
            self.c.delete_worker(self.worker.worker_id, timeout=30)
        self.assertEqual(cm.exception.code, "NOT_FOUND")


if __name__ == "__main__":
    unittest.main()
