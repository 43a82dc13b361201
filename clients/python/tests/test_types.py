"""The generated documents: up to date with the schemas, and decoding
what the protocol documents as the Go decoders do."""

import os
import re
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

import gen_types  # noqa: E402
from agentvisor import RETRYABLE, AgentvisorError, types  # noqa: E402

PROTOCOL_MD = os.path.join(ROOT, "..", "..", "protocol", "PROTOCOL.md")

# A PROTOCOL.md example's type (its fence's tag) -> its class.
CLASS_OF = {
    "task": types.Task, "cancel": types.Cancel, "message": types.Message, "permission_reply": types.PermissionReply,
    "permission_request": types.PermissionRequest, "output": types.Output, "progress": types.Progress,
    "progress_report": types.ProgressReport, "lifecycle": types.LifecycleEvent, "heartbeat": types.Heartbeat,
    "command": types.Command, "reply": types.Reply, "control": types.ControlRequest, "stop_output": types.WorkerStopOutput,
    "adopt": types.Adopt,
}


class GeneratedTest(unittest.TestCase):
    def test_types_py_is_generated_from_the_current_schemas(self):
        with open(gen_types.TARGET, encoding="utf-8") as f:
            on_disk = f.read()
        self.assertTrue(on_disk == gen_types.generate(),
                        "agentvisor/types.py is stale: run /usr/bin/python3 gen_types.py in clients/python")

    def test_every_schema_has_a_class(self):
        schemas = [n for n in os.listdir(gen_types.SCHEMA_DIR) if n.endswith(".schema.json") and n != "common.schema.json"]
        self.assertEqual(len(schemas), len(CLASS_OF))

    def test_every_code_has_its_retryable(self):
        self.assertEqual(set(types.CODES), set(RETRYABLE))


class DecodeTest(unittest.TestCase):
    def examples(self):
        with open(PROTOCOL_MD, encoding="utf-8") as f:
            text = f.read()
        found = re.findall(r"^```json (\w+)\n(.*?)^```$", text, re.S | re.M)
        self.assertGreater(len(found), 20)
        return found

    def test_the_protocol_examples_decode_and_encode_back(self):
        import json
        for kind, body in self.examples():
            with self.subTest(kind=kind, body=body[:60]):
                doc = CLASS_OF[kind].from_json(body)
                self.assertEqual(json.loads(doc.to_json()), json.loads(body))

    def test_unknown_fields_are_refused_naming_the_field(self):
        with self.assertRaises(AgentvisorError) as cm:
            types.Task.from_dict({"v": 1, "type": "task", "request_id": "r", "prompt": "p", "colour": "red"}, code="INVALID_TASK")
        self.assertEqual(cm.exception.code, "INVALID_TASK")
        self.assertIn("field colour: unknown", str(cm.exception))

    def test_wrong_values_are_refused(self):
        cases = [
            ({"v": 2, "type": "task", "request_id": "r", "prompt": "p"}, "field v"),
            ({"v": 1, "type": "task", "request_id": "has space", "prompt": "p"}, "field request_id"),
            ({"v": 1, "type": "task", "request_id": "r", "prompt": ""}, "field prompt: required"),
            ({"v": 1, "type": "task", "request_id": "r", "prompt": "p", "timeout_seconds": 86401}, "field timeout_seconds"),
            ({"v": 1, "type": "task", "request_id": "r", "prompt": "p", "force_new_session": 1}, "field force_new_session"),
            ({"v": 1, "type": "task", "request_id": "r"}, "field prompt: required"),
        ]
        for doc, want in cases:
            with self.subTest(want=want):
                with self.assertRaises(AgentvisorError) as cm:
                    types.Task.from_dict(doc, code="INVALID_TASK")
                self.assertIn(want, str(cm.exception))

    def test_nested_documents_are_classes(self):
        out = types.Output.from_dict({"v": 1, "type": "output", "request_id": "r", "worker_id": "w", "status": "failed",
                                      "error": {"code": "OOM_KILLED", "message": "m", "retryable": True},
                                      "usage": {"input": 1, "output": 2, "cache_read": 3, "cache_creation": 4},
                                      "context_tokens": 0, "cost_usd": 0, "duration_ms": 5, "timestamp": "2026-11-21T09:32:00Z"})
        self.assertIsInstance(out.usage, types.Usage)
        self.assertEqual(out.usage.cache_creation, 4)
        self.assertIsInstance(out.error, types.ErrorInfo)
        with self.assertRaises(AgentvisorError):
            types.Usage.from_dict({"input": 1, "output": 2, "cache_read": 3})
        with self.assertRaises(AgentvisorError):
            types.ErrorInfo.from_dict({"code": "NOT_A_CODE", "message": "m", "retryable": True})

    def test_a_spec_carries_a_project_image(self):
        spec = types.CommandSpec.from_dict({"agent_type": "claude", "image": {"devcontainer": '{"image": "debian"}', "build_args": {"V": "1"}}})
        self.assertIsInstance(spec.image, types.CommandSpecImage)
        self.assertEqual(spec.to_dict()["image"], {"devcontainer": '{"image": "debian"}', "build_args": {"V": "1"}})
        with self.assertRaises(AgentvisorError):
            types.CommandSpec.from_dict({"agent_type": "claude", "image": {"features": {}}})
        self.assertFalse(RETRYABLE["IMAGE_BUILD_FAILED"])

    def test_a_stale_generation_is_seen(self):
        import shutil
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            for n in os.listdir(gen_types.SCHEMA_DIR):
                shutil.copy(os.path.join(gen_types.SCHEMA_DIR, n), d)
            path = os.path.join(d, "task.schema.json")
            with open(path, encoding="utf-8") as f:
                text = f.read()
            with open(path, "w", encoding="utf-8") as f:
                f.write(text.replace('"answers"', '"answers_to"'))
            self.assertNotEqual(gen_types.generate(d), gen_types.generate())


if __name__ == "__main__":
    unittest.main()
