import { test } from 'node:test';
import assert from 'node:assert/strict';
import { RedisUrlError, parseRedisUrl, parseWaitPolicy, redactRedisUrl, redisOptions } from '../../dist/index.js';

const a = (host, port) => ({ host, port });
const base = { sentinel: false, tls: false, master: '', db: 0, username: '', password: '', sentinelUsername: '', sentinelPassword: '' };

test('parseRedisUrl reads the four schemes as the Go parser does', () => {
  const cases = [
    ['redis://127.0.0.1:6379/0', { addrs: [a('127.0.0.1', 6379)] }],
    ['redis://:s3cret@10.0.0.1:6380/2', { addrs: [a('10.0.0.1', 6380)], db: 2, password: 's3cret' }],
    ['redis://cache', { addrs: [a('cache', 6379)] }],
    ['redis://', { addrs: [a('localhost', 6379)] }],
    ['rediss://app:p%40ss%3Aw@redis.example:6390/1', { tls: true, addrs: [a('redis.example', 6390)], db: 1, username: 'app', password: 'p@ss:w' }],
    ['redis://[::1]:7000/3', { addrs: [a('::1', 7000)], db: 3 }],
    ['REDIS://h:1/0', { addrs: [a('h', 1)] }],
    ['redis+sentinel://h1:26379,h2:26380/mymaster/0', { sentinel: true, addrs: [a('h1', 26379), a('h2', 26380)], master: 'mymaster' }],
    ['redis+sentinel://s1,s2/mymaster', { sentinel: true, addrs: [a('s1', 26379), a('s2', 26379)], master: 'mymaster' }],
    ['rediss+sentinel://agentvisor:pw@h1:1,h2:2/prod-main/4?sentinel_username=watch&sentinel_password=sp%26x',
      { sentinel: true, tls: true, addrs: [a('h1', 1), a('h2', 2)], master: 'prod-main', db: 4, username: 'agentvisor', password: 'pw', sentinelUsername: 'watch', sentinelPassword: 'sp&x' }],
    ['redis://reader@h:1/0', { addrs: [a('h', 1)], username: 'reader' }],
  ];
  for (const [raw, want] of cases) assert.deepEqual(parseRedisUrl(raw), { ...base, ...want }, raw);
});

test('parseRedisUrl refuses what the Go parser refuses, without quoting the URL', () => {
  const cases = [
    ['127.0.0.1:6379', 'want redis://'],
    ['http://s3cret@h:1/0', 'unknown scheme "http"'],
    ['redis://:s3cret@h:port/0', 'a port must be a number from 1 to 65535'],
    ['redis://h:70000/0', 'a port must be a number from 1 to 65535'],
    ['redis://:s3cret@h:1/zero', 'the database must be a number of 0 or more'],
    ['redis://h:1/0/1', 'too many path segments'],
    ['redis://:s3cret@h1:1,h2:2/0', 'a redis:// URL names one server'],
    ['redis+sentinel://:s3cret@h1:1,h2:2', "needs the master's name"],
    ['redis+sentinel://h1:1,,h2:2/m', 'an empty sentinel address'],
    ['redis+sentinel://h1:1/m?password=s3cret', 'unknown query parameter "password"'],
    ['redis://h:1/0?sentinel_password=s3cret', 'unknown query parameter "sentinel_password"'],
    ['redis+sentinel://h1:1/m?sentinel_password=a&sentinel_password=s3cret', 'given 2 times'],
    ['redis://:s3cret%zz@h:1/0', 'the password is not well escaped'],
    ['redis://:s3cret@h:1/0#x', 'a fragment (#) has no meaning'],
    ['redis://[::1:6379/0', 'closing bracket'],
  ];
  for (const [raw, want] of cases) {
    assert.throws(() => parseRedisUrl(raw), (e) => e instanceof RedisUrlError && e.message.includes(want) && !e.message.includes('s3cret'), raw);
  }
});

test('redisOptions: one server, or the sentinels and the master with their own credentials', () => {
  const one = redisOptions(parseRedisUrl('rediss://u:p@h:7/2'));
  assert.equal(one.host, 'h');
  assert.equal(one.port, 7);
  assert.equal(one.db, 2);
  assert.equal(one.username, 'u');
  assert.equal(one.password, 'p');
  assert.ok(one.tls);
  assert.ok(one.connectTimeout > 0 && one.commandTimeout > 0, 'timeouts are set');
  const s = redisOptions(parseRedisUrl('redis+sentinel://:pw@s1,s2:2/main/1?sentinel_password=sp'));
  assert.deepEqual(s.sentinels, [{ host: 's1', port: 26379 }, { host: 's2', port: 2 }]);
  assert.equal(s.name, 'main');
  assert.equal(s.password, 'pw');
  assert.equal(s.sentinelPassword, 'sp');
  assert.equal(s.host, undefined);
});

test('parseWaitPolicy: one replica for a sentinel URL, none otherwise, or what the variables say', () => {
  const plain = parseRedisUrl('redis://h/0');
  const sentinel = parseRedisUrl('redis+sentinel://h/m');
  assert.deepEqual(parseWaitPolicy(undefined, undefined, plain), { replicas: 0, timeoutMs: 500 });
  assert.deepEqual(parseWaitPolicy('', '', sentinel), { replicas: 1, timeoutMs: 500 });
  assert.deepEqual(parseWaitPolicy('0', '', sentinel), { replicas: 0, timeoutMs: 500 });
  assert.deepEqual(parseWaitPolicy('2', '250ms', plain), { replicas: 2, timeoutMs: 250 });
  assert.deepEqual(parseWaitPolicy('1', '1500', plain), { replicas: 1, timeoutMs: 1500 });
  for (const [r, t] of [['-1', ''], ['1', 'soon'], ['1', '0']]) assert.throws(() => parseWaitPolicy(r, t, plain), RedisUrlError);
});

test('redactRedisUrl hides every password', () => {
  assert.equal(redactRedisUrl('redis://:pw@h:1/0'), 'redis://:xxxxx@h:1/0');
  const r = redactRedisUrl('rediss+sentinel://u:pw@h1:1,[::1]:2/m/3?sentinel_password=x');
  assert.equal(r, 'rediss+sentinel://u:xxxxx@h1:1,[::1]:2/m/3?sentinel_password=xxxxx');
  assert.equal(redactRedisUrl('nope://pw'), '(a redis URL that does not parse)');
});
