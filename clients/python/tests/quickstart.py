from agentvisor import Client
with Client.from_env() as c, c.worker(agent_type="claude", project_id="quickstart") as w:
    task = c.send(w.worker_id, "Say hello.", project_id="quickstart")
    print(task.result(timeout=600, on_progress=lambda p: print(p.step)).status)
