import { test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { Redis } from 'ioredis';
import { namedPrimary, primaryToRead } from '../../dist/primary.js';
import { sendDoc } from '../../dist/streams.js';

const old = { host: '10.0.0.1', port: 6379 };
const fresh = { host: '10.0.0.2', port: 6379 };
const says = (a, epoch, failing = false) => ({ ...a, epoch, failing });

test('namedPrimary: the newest epoch, then most sentinels, then the lowest address; not yet during a failover', () => {
  const cases = [
    { name: 'the newest epoch, although most name the old one', answers: [says(old, 1), says(old, 1), says(fresh, 2)], want: fresh },
    { name: 'most among equal epochs', answers: [says(fresh, 1), says(old, 1), says(old, 1)], want: old },
    { name: 'the lowest address among equals', answers: [says(fresh, 1), says(old, 1)], want: old },
    { name: 'a sentinel failing the master over: not yet', answers: [says(old, 1, true), says(old, 1), null], want: null },
    { name: 'an address alone (no SENTINEL MASTER) under epoch 0', answers: [says(fresh, 0), null, null], want: fresh },
    { name: 'no answer: not yet', answers: [null, null, null], want: null },
  ];
  for (const c of cases) {
    const got = namedPrimary(c.answers);
    assert.deepEqual(got && { host: got.host, port: got.port }, c.want, c.name);
  }
});

test('primaryToRead: a client of one server looks on itself', async () => {
  const r = new Redis({ host: '127.0.0.1', port: 1, lazyConnect: true });
  try {
    assert.equal(await primaryToRead(r), r);
  } finally {
    r.disconnect();
  }
});

const primary = { host: '10.0.0.2', port: 6379 };
const bulk = (v) => `$${Buffer.byteLength(String(v))}\r\n${v}\r\n`;
const array = (items) => `*${items.length}\r\n${items.map(bulk).join('')}`;

// A sentinel on a free loopback port that speaks RESP as mode says: 'hang'
// reads commands and never replies, 'noperm' refuses SENTINEL MASTER with an
// error reply, 'answer' names named (a primary) under epoch 3.
async function standIn(mode, named = primary) {
  const socks = new Set();
  const server = net.createServer((sock) => {
    socks.add(sock);
    let buf = '';
    sock.on('error', () => {});
    sock.on('data', (d) => {
      buf += d.toString();
      for (;;) {
        const lines = buf.split('\r\n');
        const n = Number(lines[0]?.slice(1));
        if (!lines[0]?.startsWith('*') || lines.length < 2 * n + 2) return;
        const args = [];
        for (let i = 0; i < n; i++) args.push(lines[2 + 2 * i].toUpperCase());
        buf = lines.slice(2 * n + 1).join('\r\n');
        if (mode === 'hang') continue;
        if (args[1] === 'MASTER') {
          sock.write(mode === 'noperm' ? "-NOPERM this user has no permissions to run the 'sentinel|master' command\r\n"
            : array(['name', 'm', 'ip', named.host, 'port', named.port, 'flags', 'master', 'config-epoch', 3]));
        } else if (args[1] === 'GET-MASTER-ADDR-BY-NAME') {
          sock.write(array([named.host, named.port]));
        } else {
          sock.write('-ERR unknown command\r\n');
        }
      }
    });
  });
  await new Promise((res) => server.listen(0, '127.0.0.1', res));
  return { port: server.address().port, close: () => { server.close(); socks.forEach((c) => c.destroy()); } };
}

// The client's own timeouts: a look that waits on them (twice, falling back
// after a timeout) takes 20 s, not the bound the tests check.
const sentinelClient = (ports) => new Redis({
  sentinels: ports.map((port) => ({ host: '127.0.0.1', port })), name: 'm',
  commandTimeout: 10000, connectTimeout: 10000, lazyConnect: true,
});

test('primaryToRead: how long the sentinels are waited on, and what they name', async () => {
  const cases = [
    { name: 'a hung sentinel is waited on once, for the look\'s timeout', modes: ['hang'], want: null },
    { name: 'hung sentinels are waited on at once', modes: ['hang', 'hang', 'hang'], want: null },
    { name: 'an answer beside a hung sentinel', modes: ['hang', 'answer'], want: primary },
    { name: 'a user not allowed SENTINEL MASTER gets the address alone', modes: ['noperm'], want: primary },
  ];
  const timeoutMs = 2000; // a hung sentinel waited on twice, or one after another, takes 4 s or more
  for (const c of cases) {
    const servers = await Promise.all(c.modes.map((m) => standIn(m)));
    const r = sentinelClient(servers.map((s) => s.port));
    try {
      const start = Date.now();
      const on = await primaryToRead(r, timeoutMs);
      const took = Date.now() - start;
      assert.deepEqual(on && { host: on.options.host, port: on.options.port }, c.want, c.name);
      assert.ok(took < 1.5 * timeoutMs, `${c.name}: took ${took} ms`);
      on?.disconnect();
    } finally {
      r.disconnect();
      servers.forEach((s) => s.close());
    }
  }
});

test('sendDoc: a look ends by the deadline, whatever hangs', async () => {
  const hung = await standIn('hang');
  const cases = [
    { name: 'hung sentinels', sentinels: () => Promise.all(['hang', 'hang'].map((m) => standIn(m))) },
    { name: 'a hung primary', sentinels: () => Promise.all([standIn('answer', { host: '127.0.0.1', port: hung.port })]) },
  ];
  try {
    for (const c of cases) {
      const servers = await c.sentinels();
      // WAIT answers short on every add, and the look after it hangs.
      const r = {
        options: sentinelClient(servers.map((s) => s.port)).options,
        pipeline: () => {
          const p = { xadd: () => p, call: () => p, exec: async () => [[null, '1-0'], [null, 0]] };
          return p;
        },
      };
      try {
        const start = Date.now();
        await assert.rejects(sendDoc(r, { replicas: 1, timeoutMs: 10 }, 's', {}, 'task', 2000), (e) => e.code === 'UPSTREAM_UNAVAILABLE', c.name);
        const took = Date.now() - start;
        assert.ok(took < 4000, `${c.name}: took ${took} ms`);
      } finally {
        servers.forEach((s) => s.close());
      }
    }
  } finally {
    hung.close();
  }
});
