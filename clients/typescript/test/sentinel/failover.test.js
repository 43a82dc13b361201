// Against a Redis Sentinel deployment (a primary, a replica, three
// sentinels, passwords on both): the client connects with the runtime's
// redis+sentinel:// URL, its writes wait for the replica (WAIT, one
// replica for a sentinel URL), and after a failover it writes to the new
// primary. The Go test TestTypeScriptSentinel in examples/ starts the
// deployment and runs this with SENTINEL_URL.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { AgentvisorClient, hasCode, parseRedisUrl } from '../../dist/index.js';

const url = process.env.SENTINEL_URL;
if (!url) throw new Error('SENTINEL_URL is not set: go test -run TestTypeScriptSentinel ./examples/ starts a Sentinel deployment');
const u = parseRedisUrl(url);

function sentinel() {
  const r = new Redis({ host: u.addrs[0].host, port: u.addrs[0].port, password: u.sentinelPassword || undefined, lazyConnect: true });
  r.on('error', () => {});
  return r;
}

async function primaryAddr(s) {
  const [host, port] = await s.call('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', u.master);
  return `${host}:${port}`;
}

async function sendUntilOk(client, workerId, prompt, ms) {
  const end = Date.now() + ms;
  for (;;) {
    try {
      return await client.sendTask(workerId, { prompt });
    } catch (e) {
      // A failover in progress: Redis not answering is retryable.
      if (!hasCode(e, 'UPSTREAM_UNAVAILABLE') || Date.now() > end) throw e;
      await new Promise((r) => setTimeout(r, 200));
    }
  }
}

test('a client on a sentinel URL writes to the primary, confirmed by its replica, and follows a failover', async () => {
  const client = await AgentvisorClient.connect({ url, prefix: 'tssentinel' });
  const s = sentinel();
  await s.connect();
  try {
    await client.redis.hset(client.keys.status('w1'), 'kind', 'long_lived');
    const first = await client.sendTask('w1', { prompt: 'before the failover' });
    const old = await primaryAddr(s);
    const direct = new Redis(`redis://:${encodeURIComponent(u.password)}@${old}/0`);
    assert.equal((await direct.xrange(first.input, '-', '+')).length, 1, 'the task is on the primary the sentinels name');
    const acked = await direct.call("WAIT", 1, 1000);
    assert.equal(Number(acked), 1, 'the replica has it');
    direct.disconnect();

    await s.call('SENTINEL', 'FAILOVER', u.master);
    const end = Date.now() + 30_000;
    while ((await primaryAddr(s)) === old) {
      assert.ok(Date.now() < end, 'the sentinels name a new primary');
      await new Promise((r) => setTimeout(r, 100));
    }
    const second = await sendUntilOk(client, 'w1', 'after the failover', 30_000);
    const now = await primaryAddr(s);
    assert.notEqual(now, old);
    const fresh = new Redis(`redis://:${encodeURIComponent(u.password)}@${now}/0`);
    const entries = (await fresh.xrange(second.input, '-', '+')).map(([, f]) => JSON.parse(f[1]).prompt);
    fresh.disconnect();
    assert.ok(entries.includes('before the failover') && entries.includes('after the failover'), JSON.stringify(entries));
  } finally {
    s.disconnect();
    await client.close();
  }
});
