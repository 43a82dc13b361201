// Against a real redis-server this file starts (a free loopback port, a
// password, and a user as narrow as the documented consumer's, who may
// not run INFO): errors by cause, a command with no manager alive, a
// command's deadline, and no log line for the ready check. redis-server
// must be on PATH (make setup installs it): the file fails without it.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { AgentvisorClient, defaultRedisUrl, hasCode, wireSpec } from '../../dist/index.js';

const password = 'pw-test';
let port;
let server;
let dir;

const freePort = () => new Promise((resolve, reject) => {
  const s = createServer();
  s.listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => resolve(p)); });
  s.on('error', reject);
});

before(async () => {
  port = await freePort();
  dir = mkdtempSync(join(tmpdir(), 'agentvisor-ts-'));
  server = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--requirepass', password, '--save', '', '--appendonly', 'no', '--dir', dir], { stdio: 'ignore' });
  await new Promise((resolve, reject) => { server.once('spawn', resolve); server.once('error', (e) => reject(new Error(`redis-server (make setup installs it): ${e.message}`))); });
  const admin = new Redis({ port, password, lazyConnect: true, retryStrategy: () => null });
  for (let i = 0; ; i++) {
    try { await admin.connect(); break; } catch (e) { if (i > 100) throw e; await new Promise((r) => setTimeout(r, 50)); }
  }
  // PROTOCOL.md, "Redis users for a consumer": no INFO.
  await admin.call('ACL', 'SETUSER', 'narrow', 'on', '>narrow-pw', 'resetchannels', '~*', '-@all', '+@connection', '-@dangerous', '+ping', '+xadd', '+xdel', '+xread', '+xrange', '+xrevrange', '+hgetall', '+hget', '+exists', '+smembers');
  admin.disconnect();
});

after(() => {
  server?.kill();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const url = (auth = `:${password}`, p = port) => `redis://${auth}@127.0.0.1:${p}/0`;

test('a refused password is REDIS_AUTH_FAILED, not retryable; a refused connection says so', async () => {
  await assert.rejects(AgentvisorClient.connect({ url: url(':wrong') }), (e) => hasCode(e, 'REDIS_AUTH_FAILED') && !e.retryable && /WRONGPASS/.test(e.message));
  await assert.rejects(AgentvisorClient.connect({ url: `redis://127.0.0.1:${port}/0` }), (e) => hasCode(e, 'REDIS_AUTH_FAILED') && /NOAUTH/.test(e.message));
  const closed = await freePort();
  await assert.rejects(AgentvisorClient.connect({ url: url(undefined, closed), connectTimeoutMs: 500 }),
    (e) => hasCode(e, 'UPSTREAM_UNAVAILABLE') && e.retryable && /connection refused/.test(e.message));
});

test('the documented consumer user connects without a word about the ready check', async () => {
  const said = [];
  const warn = console.warn;
  console.warn = (...a) => said.push(a.join(' '));
  try {
    const c = await AgentvisorClient.connect({ url: url('narrow:narrow-pw'), prefix: 'narrow' });
    await c.workerIds().catch(() => {}); // a read it may not make fails by itself, quietly
    await c.close();
  } finally {
    console.warn = warn;
  }
  assert.deepEqual(said, []);
});

test('with no manager alive a create fails NO_MANAGER at once and sends nothing', async () => {
  const c = await AgentvisorClient.connect({ url: url(), prefix: 'nomgr' });
  try {
    await c.redis.sadd('nomgr:managers', 'dead'); // its state hash expired
    const t0 = Date.now();
    await assert.rejects(c.createWorker({ agentType: 'claude' }), (e) => hasCode(e, 'NO_MANAGER') && e.retryable);
    assert.ok(Date.now() - t0 < 4000, `NO_MANAGER took ${Date.now() - t0} ms`);
    assert.equal(await c.redis.xlen('nomgr:commands'), 0);
  } finally {
    await c.close();
  }
});

test('a command carries its deadline; no reply by then is COMMAND_EXPIRED', async () => {
  const c = await AgentvisorClient.connect({ url: url(), prefix: 'silent' });
  try {
    await c.redis.sadd('silent:managers', 'm1');
    await c.redis.hset('silent:manager:m1', 'id', 'm1'); // alive, and never answers
    await assert.rejects(c.deleteWorker('w1', { timeoutMs: 500 }), (e) => hasCode(e, 'COMMAND_EXPIRED'));
    const [[, fields]] = await c.redis.xrange('silent:commands', '-', '+');
    const cmd = JSON.parse(fields[1]);
    const d = Date.parse(cmd.deadline) - Date.parse(cmd.timestamp);
    assert.equal(d, 500);
  } finally {
    await c.close();
  }
});

test('one casing: a camelCase spec goes on the wire as snake_case, the old spelling still works', () => {
  assert.deepEqual(wireSpec({ agentType: 'claude', projectId: 'p', allowedCommands: ['worker.progress'], limits: { memory: '512m' } }),
    { agent_type: 'claude', project_id: 'p', allowed_commands: ['worker.progress'], limits: { memory: '512m' } });
  assert.deepEqual(wireSpec({ agent_type: 'claude', project_id: 'p' }), { agent_type: 'claude', project_id: 'p' });
  assert.throws(() => wireSpec({ agentType: 'claude', agent_type: 'droid' }), (e) => hasCode(e, 'INVALID_COMMAND'));
});

test('with no URL the client reads the credentials file, as workerctl', () => {
  const f = join(dir, 'credentials.env');
  writeFileSync(f, `# scripts/redis.sh\nREDIS_MANAGER_URL=redis://m\nREDIS_CONSUMER_URL='${url()}'\n`);
  assert.equal(defaultRedisUrl({}, f), url());
  assert.equal(defaultRedisUrl({ REDIS_URL: 'redis://x' }, f), 'redis://x');
  assert.throws(() => defaultRedisUrl({}, join(dir, 'none.env')), (e) => hasCode(e, 'INVALID_COMMAND') && /REDIS_URL is not set/.test(e.message));
});
