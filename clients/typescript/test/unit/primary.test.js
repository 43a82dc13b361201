import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { namedPrimary, primaryToRead } from '../../dist/primary.js';

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
