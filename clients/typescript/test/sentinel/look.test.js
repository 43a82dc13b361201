// The primary a look for an entry reads after a short WAIT (primaryToRead)
// across a failover: from the promotion of the replica to the end of the
// failover the old primary still takes writes, and drops them when it is
// demoted, while most sentinels still name it. The Go test
// TestTypeScriptSentinel in examples/ runs this with SENTINEL_URL, after
// failover.test.js on the same deployment.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { AgentvisorClient, parseRedisUrl } from '../../dist/index.js';
import { primaryToRead } from '../../dist/primary.js';

const url = process.env.SENTINEL_URL;
if (!url) throw new Error('SENTINEL_URL is not set: go test -run TestTypeScriptSentinel ./examples/ starts a Sentinel deployment');
const u = parseRedisUrl(url);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function server(addr) {
  const [host, port] = addr.split(':');
  const r = new Redis({ host, port: Number(port), password: u.password || undefined, lazyConnect: true, maxRetriesPerRequest: 0 });
  r.on('error', () => {});
  return r;
}

/** The address primaryToRead names, or null for "not yet". */
async function named(r) {
  const on = await primaryToRead(r);
  if (on === null) return null;
  on.disconnect();
  return `${on.options.host}:${on.options.port}`;
}

/** The primary primaryToRead names and a replica in sync with it (a failover before this one may still be settling). */
async function primaryAndReplica(r) {
  const end = Date.now() + 30_000;
  for (;;) {
    const p = await named(r);
    if (p !== null) {
      const s = server(p);
      const role = await s.call('ROLE').catch(() => []);
      s.disconnect();
      if (role[0] === 'master' && role[2]?.length > 0) return [p, `${role[2][0][0]}:${role[2][0][1]}`];
    }
    assert.ok(Date.now() < end, 'a primary with a replica within 30 s');
    await sleep(100);
  }
}

test('the look never reads the old primary once its replica is promoted, waits during the failover, then reads the new one', async () => {
  const client = await AgentvisorClient.connect({ url, prefix: 'tslook' });
  const r = client.redis;
  const [old, replica] = await primaryAndReplica(r);
  const sentinel = new Redis({ host: u.addrs[0].host, port: u.addrs[0].port, password: u.sentinelPassword || undefined, lazyConnect: true });
  sentinel.on('error', () => {});
  const watched = server(replica);
  let promoted = false;
  let watching = true;
  const watcher = (async () => {
    while (watching && !promoted) {
      const role = await watched.call('ROLE').catch(() => []);
      if (role[0] === 'master') promoted = true;
      await sleep(2);
    }
  })();
  try {
    // Until a sentinel takes it: one may still count the demoted primary of
    // an earlier failover as no good replica yet (NOGOODSLAVE).
    for (const end = Date.now() + 30_000; ;) {
      try {
        await sentinel.call('SENTINEL', 'FAILOVER', u.master);
        break;
      } catch (e) {
        assert.ok(Date.now() < end, `SENTINEL FAILOVER: ${e.message}`);
        await sleep(200);
      }
    }
    let refused = 0;
    let wrong = 0;
    let last = old;
    for (const end = Date.now() + 30_000; last !== replica; await sleep(5)) {
      assert.ok(Date.now() < end, `the new primary ${replica} named within 30 s (last ${last}, wrong ${wrong}, refused ${refused})`);
      const after = promoted;
      const p = await named(r);
      if (p === null) refused++;
      else if (p === old && after) wrong++;
      if (p !== null) last = p;
    }
    console.log(`the new primary named; ${refused} looks refused while the sentinels failed over`);
    assert.equal(wrong, 0, `the old primary ${old} named ${wrong} times after its replica's promotion`);
    assert.ok(promoted, 'the watcher saw the replica promoted');
    assert.ok(refused > 0, 'no look was refused during the failover: the test saw none of it');
  } finally {
    watching = false;
    await watcher;
    watched.disconnect();
    sentinel.disconnect();
    await client.close();
  }
});
