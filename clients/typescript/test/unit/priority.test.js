import { test } from 'node:test';
import assert from 'node:assert/strict';
import { AgentvisorClient, Keys, hasCode, taskDoc } from '../../dist/index.js';

// Enough of ioredis for sending a task and its control documents: status
// hashes, streams as lists, a pipeline of XREVRANGE and the run's EVAL.
class FakeRedis {
  constructor(hashes) {
    this.hashes = hashes;
    this.streams = new Map();
    this.seq = 0;
  }

  async hmget(key, ...fields) {
    const h = this.hashes[key];
    return fields.map((f) => h?.[f] ?? null);
  }

  async xadd(stream, ...args) {
    const id = `${++this.seq}-0`;
    const data = args[args.indexOf('data') + 1];
    if (!this.streams.has(stream)) this.streams.set(stream, []);
    this.streams.get(stream).push(JSON.parse(data));
    return id;
  }

  pipeline() {
    const results = [];
    const p = {
      xrevrange: () => { results.push([null, []]); return p; },
      eval: (_script, _n, key, ...args) => {
        if (!this.hashes[key]) this.hashes[key] = Object.fromEntries(args.flatMap((v, i) => (i % 2 ? [] : [[v, args[i + 1]]])));
        results.push([null, 1]);
        return p;
      },
      exec: async () => results,
    };
    return p;
  }

  types(stream) {
    return (this.streams.get(stream) ?? []).map((d) => d.type);
  }
}

async function client() {
  const r = new FakeRedis({
    'p:status:d1': { kind: 'developer', agent_type: 'claude' },
    'p:status:w1': { kind: 'long_lived', agent_type: 'claude' },
  });
  return { r, c: await AgentvisorClient.connect({ redis: r, prefix: 'p' }) };
}

test('Keys names a developer queue for each priority', () => {
  const k = new Keys('p');
  assert.equal(k.developerInput(), 'p:developer:input');
  assert.equal(k.developerInput('normal'), 'p:developer:input');
  assert.equal(k.developerInput('high'), 'p:developer:input:high');
  assert.equal(k.inputFor('developer', 'd1', 'low'), 'p:developer:input:low');
  assert.equal(k.inputFor('long_lived', 'w1', 'high'), 'p:w1:input');
  assert.deepEqual(k.developerInputs(), ['p:developer:input:high', 'p:developer:input', 'p:developer:input:low']);
  assert.throws(() => k.developerInput('urgent'), (e) => hasCode(e, 'INVALID_TASK'));
});

test('taskDoc carries the priority and refuses an unknown one (INVALID_TASK)', () => {
  assert.equal(taskDoc({ prompt: 'x', priority: 'high' }).priority, 'high');
  assert.equal('priority' in taskDoc({ prompt: 'x' }), false);
  assert.throws(() => taskDoc({ prompt: 'x', priority: 'urgent' }), (e) => hasCode(e, 'INVALID_TASK'));
});

test('a developer task goes to its priority\'s queue', async () => {
  const { r, c } = await client();
  for (const [requestId, priority, stream] of [['r1', 'high', 'p:developer:input:high'], ['r2', 'low', 'p:developer:input:low'],
    ['r3', 'normal', 'p:developer:input'], ['r4', undefined, 'p:developer:input']]) {
    const sent = await c.sendTask('d1', { prompt: 'hi', requestId, priority });
    assert.deepEqual([sent.input, sent.control, sent.output], [stream, 'p:developer:input', 'p:developer:output'], String(priority));
    assert.ok(r.streams.get(stream).some((d) => d.request_id === requestId && d.priority === priority), String(priority));
  }
  assert.equal(r.hashes['p:run:r1'].worker_id, '');
  assert.equal(r.hashes['p:run:r1'].status, 'requested');
});

test('cancel, messages and permission replies of a developer task go to the normal queue', async () => {
  const { r, c } = await client();
  const sent = await c.sendTask('d1', { prompt: 'hi', requestId: 'r5', priority: 'high' });
  await c.cancelTask(sent, 'changed my mind');
  await c.sendMessage(sent, 'use staging');
  await c.allowPermission(sent, 'perm-1');
  await c.denyPermission(sent, 'perm-2', 'not here');
  assert.deepEqual(r.types('p:developer:input:high'), ['task']);
  assert.deepEqual(r.types('p:developer:input'), ['cancel', 'message', 'permission_reply', 'permission_reply']);
  // A SentTask made by hand, without control: its input.
  await c.cancelTask({ requestId: 'r5', workerId: 'd1', input: 'p:developer:input', output: 'p:developer:output', after: '0-0' });
  assert.deepEqual(r.types('p:developer:input').at(-1), 'cancel');
});

test('a long-lived worker ignores the priority', async () => {
  const { r, c } = await client();
  const sent = await c.sendTask('w1', { prompt: 'hi', requestId: 'r6', priority: 'low' });
  await c.cancelTask(sent);
  assert.deepEqual([sent.input, sent.control], ['p:w1:input', 'p:w1:input']);
  assert.deepEqual(r.types('p:w1:input'), ['task', 'cancel']);
});

test('a bad priority is not sent', async () => {
  const { r, c } = await client();
  await assert.rejects(c.sendTask('d1', { prompt: 'hi', priority: 'urgent' }), (e) => hasCode(e, 'INVALID_TASK'));
  assert.equal(r.streams.size, 0);
});
