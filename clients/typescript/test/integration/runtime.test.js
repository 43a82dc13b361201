// Against a real runtime: a worker-manager, real worker containers, and the
// stub model, whose script the test sets through STUB_CONTROL_URL (the Go
// test TestTypeScriptClient in examples/ starts all of it and runs this
// with its environment: REDIS_URL, WORKER_KEY_PREFIX, STUB_CONTROL_URL).
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { AgentvisorClient, AgentvisorError, AwaitTimeoutError, hasCode } from '../../dist/index.js';

for (const v of ['REDIS_URL', 'WORKER_KEY_PREFIX', 'STUB_CONTROL_URL']) {
  if (!process.env[v]) throw new Error(`${v} is not set: these tests need a runtime (go test -run TestTypeScript ./examples/ starts one)`);
}

const project = 'ts-client';
const minute = 60_000;
let client;
let workerId;

async function stub(path, body) {
  const res = await fetch(process.env.STUB_CONTROL_URL + path, body === undefined ? {} : { method: 'POST', body: JSON.stringify(body) });
  const text = await res.text();
  assert.equal(res.status, 200, `stub ${path}: ${text}`);
  return JSON.parse(text);
}
const setScript = (steps) => stub('/script', { steps });
const final = (stop, text = 'Done.') => ({ text: `${text}\n${JSON.stringify(stop)}` });
const progressCall = (step, pct) => ({ tool_use: { name: 'Bash', input: { command: `worker-wrapper progress --step "${step}" --pct ${pct}`, description: 'progress' } } });

async function untilRun(requestId, states, ms = minute) {
  const end = Date.now() + ms;
  for (;;) {
    const run = await client.getRun(requestId).catch(() => undefined);
    if (run && states.includes(run.status)) return run;
    if (Date.now() > end) throw new Error(`run ${requestId} never reached ${states}: ${JSON.stringify(run)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

before(async () => {
  client = await AgentvisorClient.connect({ commandTimeoutMs: 4 * minute });
});

after(async () => {
  await client?.close();
});

test('createWorker makes a worker the client can read back', async () => {
  const created = await client.createWorker({ agent_type: 'claude', project_id: project, allowed_commands: ['worker.progress'] });
  workerId = created.workerId;
  assert.equal(created.worker.worker_id, workerId);
  assert.equal(created.worker.agent_type, 'claude');
  const status = await client.workerStatus(workerId);
  assert.equal(status.worker_id, workerId);
  const hash = await client.getWorker(workerId);
  assert.equal(hash.hash.kind, 'long_lived');
  assert.equal(hash.hash.project_id, project);
  assert.ok((await client.workerIds()).includes(workerId));
});

test('sendTask and awaitOutput: the output, and the run from requested to completed', async () => {
  await setScript([final({ status: 'complete', result: { greeting: 'hello' } }, 'Hello!')]);
  const sent = await client.sendTask(workerId, { prompt: 'Say hello.', projectId: project, taskId: 'T-1' });
  const early = await client.getRun(sent.requestId);
  assert.ok(['requested', 'queued', 'running', 'completed'].includes(early.status), early.status);
  assert.equal(early.workerId, workerId);
  assert.equal(early.projectId, project);
  const out = await client.awaitOutput(sent, { timeoutMs: 3 * minute });
  assert.equal(out.status, 'complete', JSON.stringify(out));
  assert.deepEqual(out.result, { greeting: 'hello' });
  assert.equal(out.request_id, sent.requestId);
  assert.equal(out.task_id, 'T-1');
  const run = await client.getRun(sent.requestId);
  assert.equal(run.status, 'completed');
  assert.equal(run.taskId, 'T-1');
  assert.ok(run.finishedAt);
});

test('events iterates over the progress events, then the output, and ends', async () => {
  await setScript([progressCall('Greeting', 100), final({ status: 'complete', result: { greeting: 'hello' } })]);
  const sent = await client.sendTask(workerId, { prompt: 'Report progress, then say hello.', projectId: project });
  const seen = [];
  for await (const ev of client.events(sent, { timeoutMs: 3 * minute })) seen.push(ev);
  const last = seen.at(-1);
  assert.equal(last.type, 'output');
  assert.equal(last.doc.status, 'complete', JSON.stringify(last.doc));
  const steps = seen.filter((e) => e.type === 'progress').map((e) => e.doc);
  assert.ok(steps.some((p) => p.step === 'Greeting' && p.progress_pct === 100), JSON.stringify(steps));
  // progress() replays the same stream from the send on: only the progress events.
  const again = [];
  for await (const p of client.progress(sent, { timeoutMs: minute })) again.push(p.step);
  assert.ok(again.includes('Greeting'));
});

test('cancelTask ends a running task: its output is cancelled, CANCELLED', async () => {
  await setScript([{ ...final({ status: 'complete', result: {} }), delay_ms: 120_000 }]);
  const sent = await client.sendTask(workerId, { prompt: 'Take your time.', projectId: project });
  await untilRun(sent.requestId, ['running']);
  await new Promise((r) => setTimeout(r, 500)); // the agent's model call under way
  const t0 = Date.now();
  await client.cancelTask(sent, 'the user changed their mind');
  const out = await client.awaitOutput(sent, { timeoutMs: minute });
  assert.equal(out.status, 'cancelled', JSON.stringify(out));
  assert.equal(out.error.code, 'CANCELLED');
  assert.equal(out.error.retryable, false);
  assert.match(out.error.message, /the user changed their mind/);
  assert.ok(Date.now() - t0 < 30_000, 'cancelled well before the model answered');
  const run = await client.getRun(sent.requestId);
  assert.equal(run.status, 'failed');
  assert.match(run.error, /^CANCELLED:/);
});

test('sendMessage steers a running task: the agent gets the text', async () => {
  await setScript([{ ...final({ status: 'complete', result: { turn: 1 } }), delay_ms: 3000 }, final({ status: 'complete', result: { turn: 2 } })]);
  const sent = await client.sendTask(workerId, { prompt: 'Write the report.', projectId: project });
  await untilRun(sent.requestId, ['running']);
  await client.sendMessage(sent, 'Use the staging database, not production.');
  const steps = [];
  const out = await client.awaitOutput(sent, { timeoutMs: 3 * minute, onProgress: (p) => steps.push(p.step) });
  assert.equal(out.status, 'complete', JSON.stringify(out));
  assert.ok(steps.some((s) => s.startsWith('message ')), `a progress event says what became of the message: ${JSON.stringify(steps)}`);
  const texts = await stub('/requests');
  assert.ok(texts.some((t) => t.includes('Use the staging database, not production.')), 'the model saw the message');
  assert.deepEqual(out.result, { turn: 2 });
});

test('answerQuestion continues a blocked run', async () => {
  await setScript([final({ status: 'blocked', question: 'Which colour?' }), final({ status: 'complete', result: { colour: 'blue' } })]);
  const first = await client.sendTask(workerId, { prompt: 'Paint the shed.', projectId: project });
  const blocked = await client.awaitOutput(first, { timeoutMs: 3 * minute });
  assert.equal(blocked.status, 'blocked', JSON.stringify(blocked));
  assert.equal(blocked.question, 'Which colour?');
  const second = await client.answerQuestion(workerId, first.requestId, 'Blue.');
  const out = await client.awaitOutput(second, { timeoutMs: 3 * minute });
  assert.equal(out.status, 'complete', JSON.stringify(out));
  assert.equal(out.answers, first.requestId);
  assert.equal(out.session_id, blocked.session_id);
  assert.deepEqual(out.result, { colour: 'blue' });
});

test('setBudget sets the project budget the runtime reads', async () => {
  await client.setBudget('ts-budget', { limitUsd: 5, warnUsd: 4 });
  assert.deepEqual(await client.getBudget('ts-budget'), { projectId: 'ts-budget', limitUsd: 5, warnUsd: 4, spentUsd: 0 });
  await assert.rejects(client.setBudget('ts-budget', { limitUsd: 1, warnUsd: 2 }), (e) => hasCode(e, 'INVALID_COMMAND'));
  await client.setBudget('ts-budget', { limitUsd: 0 });
  assert.equal((await client.getBudget('ts-budget')).limitUsd, 0);
  const usage = await client.getUsage(project);
  assert.ok(usage.tasks >= 4, JSON.stringify(usage));
});

test('errors carry the protocol codes', async () => {
  await assert.rejects(client.workerStatus('no-such-worker'), (e) => e instanceof AgentvisorError && e.code === 'NOT_FOUND' && e.retryable === false);
  await assert.rejects(client.sendTask('no-such-worker', { prompt: 'x' }), (e) => hasCode(e, 'NOT_FOUND'));
  await assert.rejects(client.getRun('no-such-run'), (e) => hasCode(e, 'NOT_FOUND'));
  await assert.rejects(client.sendTask(workerId, { prompt: '' }), (e) => hasCode(e, 'INVALID_TASK'));
  await assert.rejects(client.command({ action: 'pause' }), (e) => hasCode(e, 'INVALID_COMMAND'), 'a command the manager refuses');
  const sent = { requestId: 'never-sent', workerId, input: '', output: client.keys.output(workerId), after: '$' };
  const t0 = Date.now();
  await assert.rejects(client.awaitOutput({ ...sent, after: '9999999999999-0' }, { timeoutMs: 400 }), (e) => e instanceof AwaitTimeoutError && e.code === 'UPSTREAM_UNAVAILABLE');
  assert.ok(Date.now() - t0 < 3000);
});

test('watch follows the lifecycle and the output streams', async () => {
  const seen = [];
  for await (const ev of client.watch({ fromStart: true, workers: [workerId], timeoutMs: 1500 })) seen.push(ev);
  const events = seen.filter((e) => e.type === 'lifecycle').map((e) => e.doc.event);
  assert.ok(events.includes('created') && events.includes('task_completed'), JSON.stringify(events));
  assert.ok(seen.some((e) => e.type === 'output' && e.doc.status === 'cancelled'));
  assert.ok(!seen.some((e) => e.type === 'invalid'), 'every entry decodes');
});

test('a developer task goes to its priority\'s queue; its cancel, to the normal queue, ends it', async () => {
  const devProject = `${project}-dev`;
  const dev = (await client.createWorker({ agent_type: 'claude', kind: 'developer', project_id: devProject })).workerId;
  try {
    await setScript([{ ...final({ status: 'complete', result: {} }), delay_ms: 120_000 }]);
    const high = await client.sendTask(dev, { prompt: 'Take your time.', projectId: devProject, priority: 'high' });
    assert.deepEqual([high.input, high.control], [client.keys.developerInput('high'), client.keys.developerInput()]);
    await untilRun(high.requestId, ['running'], 2 * minute);
    await client.cancelTask(high, 'not now');
    const cancelled = await client.awaitOutput(high, { timeoutMs: minute });
    assert.equal(cancelled.status, 'cancelled', JSON.stringify(cancelled));
    assert.equal(cancelled.error.code, 'CANCELLED');
    await setScript([final({ status: 'complete', result: { low: true } })]);
    const low = await client.sendTask(dev, { prompt: 'Quick.', projectId: devProject, priority: 'low' });
    assert.equal(low.input, client.keys.developerInput('low'));
    const out = await client.awaitOutput(low, { timeoutMs: 3 * minute });
    assert.equal(out.status, 'complete', JSON.stringify(out));
    assert.deepEqual(out.result, { low: true });
    assert.equal((await client.getRun(low.requestId)).workerId, dev);
  } finally {
    await client.deleteWorker(dev);
  }
});

test('deleteWorker retires the worker', async () => {
  await client.deleteWorker(workerId);
  assert.ok(!(await client.workerIds()).includes(workerId));
  const hash = await client.getWorker(workerId); // kept for RETENTION
  assert.ok(hash.hash.retired_at, JSON.stringify(hash.hash));
});
