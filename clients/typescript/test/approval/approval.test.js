// Against a runtime whose workers ask before a tool call ALLOWED_COMMANDS
// does not allow (AGENT_APPROVAL, AGENT_PERSISTENT): a permission request
// on the task's output, allowed or denied by the client. The Go test
// TestTypeScriptApproval in examples/ starts the runtime and runs this with
// its environment (REDIS_URL, WORKER_KEY_PREFIX, STUB_CONTROL_URL).
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { AgentvisorClient } from '../../dist/index.js';

for (const v of ['REDIS_URL', 'WORKER_KEY_PREFIX', 'STUB_CONTROL_URL']) {
  if (!process.env[v]) throw new Error(`${v} is not set: go test -run TestTypeScriptApproval ./examples/ starts a runtime`);
}

const minute = 60_000;
let client;
let workerId;

async function stub(path, body) {
  const res = await fetch(process.env.STUB_CONTROL_URL + path, body === undefined ? {} : { method: 'POST', body: JSON.stringify(body) });
  const text = await res.text();
  assert.equal(res.status, 200, `stub ${path}: ${text}`);
  return JSON.parse(text);
}
const bash = (command) => ({ tool_use: { name: 'Bash', input: { command, description: command } } });
const done = { text: 'Done.\n{"status": "complete", "result": {}}' };

// runAnswering sends a task and answers each permission request with
// answer; it returns the output and the requests.
async function runAnswering(prompt, answer) {
  const sent = await client.sendTask(workerId, { prompt, projectId: 'ts-approval' });
  const asked = [];
  for await (const ev of client.events(sent, { timeoutMs: 3 * minute })) {
    if (ev.type === 'permission_request') {
      asked.push(ev.doc);
      await answer(sent, ev.doc);
    }
    if (ev.type === 'output') return { out: ev.doc, asked };
  }
  throw new Error('no output');
}

before(async () => {
  client = await AgentvisorClient.connect();
  ({ workerId } = await client.createWorker({ agent_type: 'claude', project_id: 'ts-approval', allowed_commands: ['worker.progress'] }, { timeoutMs: 4 * minute }));
});

after(async () => {
  if (workerId) await client.deleteWorker(workerId).catch(() => {});
  await client?.close();
});

test('allowPermission lets the tool call run', async () => {
  await stub('/script', { steps: [bash('touch approved.txt'), bash('ls'), done] });
  const { out, asked } = await runAnswering('Make the file, then list the files.', (sent, req) => client.allowPermission(sent, req));
  assert.equal(out.status, 'complete', JSON.stringify(out));
  assert.equal(asked.length, 1, JSON.stringify(asked));
  assert.equal(asked[0].tool, 'Bash');
  assert.equal(asked[0].input.command, 'touch approved.txt');
  const texts = await stub('/requests');
  assert.ok(texts.some((t) => t.includes('approved.txt')), 'ls shows the file the allowed command made');
});

test('denyPermission refuses it, and the model reads why', async () => {
  await stub('/script', { steps: [bash('touch refused.txt'), done] });
  const { out, asked } = await runAnswering('Make another file.', (sent, req) => client.denyPermission(sent, req, 'Not on this branch.'));
  assert.equal(out.status, 'complete', JSON.stringify(out));
  assert.equal(asked.length, 1);
  assert.equal(asked[0].input.command, 'touch refused.txt');
  const texts = await stub('/requests');
  assert.ok(texts.at(-1).includes('Not on this branch.'), `the denial's message reached the model: ${texts.at(-1).slice(-500)}`);
});
