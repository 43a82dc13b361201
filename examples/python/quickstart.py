#!/usr/bin/python3
"""The quickstart in Python: creates a worker through the command stream,
sends it a task on its input stream, prints its progress and its output,
and deletes the worker. The worker-manager must be running.

    REDIS_URL=redis://consumer:<password>@127.0.0.1:6379/0 \\
    PYTHONPATH=clients/python /usr/bin/python3 examples/python/quickstart.py "Say hello."

REDIS_URL may be redis://, rediss:// or a redis+sentinel:// URL;
WORKER_KEY_PREFIX is read as every component reads it.
"""

import json
import sys
import time

from agentvisor import AgentvisorError, Client

PROMPT = ('Report progress by running: worker-wrapper progress --step "Greeting" --pct 100, '
          'then finish with {"status": "complete", "result": {"greeting": "hello"}}.')


def main(argv):
    prompt = " ".join(argv) or PROMPT
    with Client.from_env() as c:
        # 1. A worker: Claude Code in its own container; it may report progress.
        w = c.create_worker(agent_type="claude", project_id="quickstart", allowed_commands=["worker.progress"])
        print(f"worker {w.worker_id} created (image {w.image})")
        try:
            # 2. A task on its input stream, 3. its progress and output.
            task = c.send(w.worker_id, prompt, request_id=f"quickstart-{time.time_ns()}", project_id="quickstart")
            print(f"task {task.request_id} sent")
            out = task.result(timeout=300, on_progress=lambda p: print(f"progress: {p.step}"))
            print(f"output: {out.status}, result {json.dumps(out.result)}, {out.usage.input} input and "
                  f"{out.usage.output} output tokens, ${out.cost_usd:.4f}")
            if out.status != "complete":
                print(f"the task ended {out.status}: {out.error}", file=sys.stderr)
                return 1
        finally:
            c.delete_worker(w.worker_id)
            print(f"worker {w.worker_id} deleted")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except AgentvisorError as e:
        print(f"quickstart: {e}", file=sys.stderr)
        sys.exit(1)
