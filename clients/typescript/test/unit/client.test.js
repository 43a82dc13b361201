import { test } from 'node:test';
import assert from 'node:assert/strict';
import { AgentvisorClient, AgentvisorError, Keys, decodeEntry, hasCode, taskDoc } from '../../dist/index.js';

test('Keys spells PROTOCOL.md names under the prefix', () => {
  const k = new Keys('staging:worker');
  assert.equal(k.commands(), 'staging:worker:commands');
  assert.equal(k.input('w1'), 'staging:worker:w1:input');
  assert.equal(k.output('w1'), 'staging:worker:w1:output');
  assert.equal(k.status('w1'), 'staging:worker:status:w1');
  assert.equal(k.run('r1'), 'staging:worker:run:r1');
  assert.equal(k.replies('c'), 'staging:worker:replies:c');
  assert.equal(k.projectBudget('p'), 'staging:worker:budget:project:p');
  assert.equal(k.inputFor('developer', 'w1'), 'staging:worker:developer:input');
  assert.equal(new Keys().lifecycle(), 'worker:lifecycle');
  assert.throws(() => new Keys('bad prefix'), AgentvisorError);
  assert.throws(() => new Keys('worker:'), AgentvisorError);
});

test('taskDoc makes the wire task and refuses what the worker would (INVALID_TASK)', () => {
  const d = taskDoc({ prompt: 'hi', projectId: 'p', timeoutSeconds: 60, maxBudgetUsd: 1.5, metadata: { chat: 1 } });
  assert.equal(d.v, 1);
  assert.equal(d.type, 'task');
  assert.match(d.request_id, /^task-\d+-[0-9a-f]{8}$/);
  assert.deepEqual({ ...d, request_id: 'x' }, { v: 1, type: 'task', request_id: 'x', prompt: 'hi', project_id: 'p', timeout_seconds: 60, max_budget_usd: 1.5, metadata: { chat: 1 } });
  const r = taskDoc({ prompt: 'hi', requestId: 'r', trigger: 'cron', retry: { attempts: 2, backoffMs: [500] } });
  assert.deepEqual({ trigger: r.trigger, retry: r.retry }, { trigger: 'cron', retry: { attempts: 2, backoff_ms: [500] } });
  assert.deepEqual(taskDoc({ prompt: 'hi', retry: {} }).retry, {});
  for (const bad of [{ prompt: '' }, { prompt: 'x', requestId: 'has space' }, { prompt: 'x', timeoutSeconds: 90000 }, { prompt: 'x', maxBudgetUsd: -1 }, { prompt: 'x'.repeat((1 << 20) + 1) }]) {
    assert.throws(() => taskDoc(bad), (e) => hasCode(e, 'INVALID_TASK') && e.retryable === false, JSON.stringify(bad).slice(0, 60));
  }
});

test('decodeEntry switches on type and refuses what is not a document of version 1', () => {
  const prog = decodeEntry('s', '1-0', ['data', JSON.stringify({ v: 1, type: 'progress', worker_id: 'w', request_id: 'r', step: 'x', timestamp: 't' })]);
  assert.equal(prog.type, 'progress');
  assert.equal(prog.doc.step, 'x');
  assert.equal(decodeEntry('s', '1-0', ['data', '{"v":2,"type":"progress"}']).type, 'invalid');
  assert.equal(decodeEntry('s', '1-0', ['data', 'nope']).type, 'invalid');
  assert.equal(decodeEntry('s', '1-0', ['other', '{}']).type, 'invalid');
  const missing = decodeEntry('s', '1-0', ['data', '{"v":1,"type":"output","request_id":"r"}']);
  assert.equal(missing.type, 'invalid');
  assert.match(missing.error, /field worker_id: required/);
});

test('AgentvisorError carries the code and its retryable flag', () => {
  const e = new AgentvisorError('RESOURCE_EXHAUSTED', 'no slot');
  assert.ok(e instanceof Error);
  assert.equal(e.code, 'RESOURCE_EXHAUSTED');
  assert.equal(e.retryable, true);
  assert.equal(e.message, 'RESOURCE_EXHAUSTED: no slot');
  const f = AgentvisorError.from({ code: 'NOT_FOUND', message: 'no worker', retryable: false });
  assert.equal(f.code, 'NOT_FOUND');
  assert.equal(f.retryable, false);
});

test('connect to a Redis that is not there fails UPSTREAM_UNAVAILABLE within its timeout', async () => {
  const t0 = Date.now();
  await assert.rejects(AgentvisorClient.connect({ url: 'redis://127.0.0.1:1/0', connectTimeoutMs: 500 }), (e) => hasCode(e, 'UPSTREAM_UNAVAILABLE') && e.retryable);
  assert.ok(Date.now() - t0 < 5000);
});

test('wireSpec passes a project image, buildArgs as the wire build_args', async () => {
  const { wireSpec } = await import('../../dist/index.js');
  const w = wireSpec({ agentType: 'claude', image: { dockerfile: 'FROM debian\n', buildArgs: { V: '1' } } });
  assert.deepEqual(w, { agent_type: 'claude', image: { dockerfile: 'FROM debian\n', build_args: { V: '1' } } });
  assert.deepEqual(wireSpec({ agentType: 'claude', image: { devcontainer: '{"image": "debian"}' } }).image, { devcontainer: '{"image": "debian"}' });
  assert.throws(() => wireSpec({ agentType: 'claude', image: { dockerfile: 'x', buildArgs: {}, build_args: {} } }), (e) => e.code === 'INVALID_COMMAND');
});
