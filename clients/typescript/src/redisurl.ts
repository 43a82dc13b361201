// Redis URLs, as every component of the runtime takes them (PROTOCOL.md,
// "Redis URL"; protocol/redisurl.go is the Go parser this one follows):
//
//   redis://[[user]:password@]host[:port][/db]
//   rediss://...                                    (TLS)
//   redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/master[/db][?sentinel_username=u&sentinel_password=p]
//   rediss+sentinel://...                           (TLS to the sentinels and the servers)
import type { RedisOptions } from 'ioredis';

/** A Redis URL that does not parse; its message never quotes the URL (it may hold a password). */
export class RedisUrlError extends Error {
  constructor(what: string) {
    super(`bad redis URL: ${what}`);
    this.name = 'RedisUrlError';
  }
}

export interface RedisAddress {
  host: string;
  port: number;
}

/** A parsed Redis URL. */
export interface RedisUrl {
  /** addrs are sentinels, which name the current primary of master; otherwise addrs holds the one server. */
  sentinel: boolean;
  tls: boolean;
  addrs: RedisAddress[];
  master: string;
  db: number;
  /** The data server's (the primary's) user and password; an empty username with a password is the default user. */
  username: string;
  password: string;
  sentinelUsername: string;
  sentinelPassword: string;
}

const schemeRe = /^[A-Za-z][A-Za-z0-9+.-]{0,19}$/;

function unescape(s: string, what: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    throw new RedisUrlError(`the ${what} is not well escaped`);
  }
}

function hostPort(h: string, defaultPort: number, sentinel: boolean): RedisAddress {
  if (h === '') {
    if (sentinel) throw new RedisUrlError('an empty sentinel address');
    return { host: 'localhost', port: defaultPort };
  }
  let host = h;
  let port = String(defaultPort);
  if (h.startsWith('[')) {
    const end = h.indexOf(']');
    if (end < 0) throw new RedisUrlError('an IPv6 address without its closing bracket');
    host = h.slice(1, end);
    const tail = h.slice(end + 1);
    if (tail !== '') {
      if (!tail.startsWith(':')) throw new RedisUrlError('junk after an IPv6 address');
      port = tail.slice(1);
    }
  } else {
    const i = h.lastIndexOf(':');
    if (i >= 0) [host, port] = [h.slice(0, i), h.slice(i + 1)];
  }
  const n = /^[0-9]+$/.test(port) ? Number(port) : NaN;
  if (!(n >= 1 && n <= 65535)) throw new RedisUrlError('a port must be a number from 1 to 65535');
  const bad = h.startsWith('[') ? /[ /\\?#@[\]\t\r\n]/ : /[ /\\?#@[\]\t\r\n:]/;
  if (host === '' || bad.test(host)) throw new RedisUrlError('a host name is empty or malformed');
  return { host, port: n };
}

function parseQuery(u: RedisUrl, raw: string): void {
  if (raw === '') return;
  const values = new Map<string, string[]>();
  for (const pair of raw.split('&')) {
    if (pair === '') continue;
    const eq = pair.indexOf('=');
    const [k, v] = [eq < 0 ? pair : pair.slice(0, eq), eq < 0 ? '' : pair.slice(eq + 1)].map((x) => unescape(x.replace(/\+/g, ' '), 'query'));
    values.set(k, [...(values.get(k) ?? []), v]);
  }
  for (const [k, vs] of values) {
    if (!u.sentinel || (k !== 'sentinel_username' && k !== 'sentinel_password')) {
      throw new RedisUrlError(`unknown query parameter ${JSON.stringify(k.slice(0, 40))} (a sentinel URL takes sentinel_username and sentinel_password)`);
    }
    if (vs.length !== 1) throw new RedisUrlError(`query parameter ${k} given ${vs.length} times`);
    if (k === 'sentinel_username') u.sentinelUsername = vs[0];
    else u.sentinelPassword = vs[0];
  }
}

/** Parses a Redis URL of one of the four schemes; throws RedisUrlError. */
export function parseRedisUrl(raw: string): RedisUrl {
  const u: RedisUrl = { sentinel: false, tls: false, addrs: [], master: '', db: 0, username: '', password: '', sentinelUsername: '', sentinelPassword: '' };
  const sep = raw.indexOf('://');
  if (sep < 0) throw new RedisUrlError('want redis://, rediss://, redis+sentinel:// or rediss+sentinel://');
  const scheme = raw.slice(0, sep);
  switch (scheme.toLowerCase()) {
    case 'redis': break;
    case 'rediss': u.tls = true; break;
    case 'redis+sentinel': u.sentinel = true; break;
    case 'rediss+sentinel': u.sentinel = true; u.tls = true; break;
    default: {
      const what = schemeRe.test(scheme) ? `unknown scheme ${JSON.stringify(scheme)}` : 'an unknown scheme';
      throw new RedisUrlError(`${what} (want redis, rediss, redis+sentinel or rediss+sentinel)`);
    }
  }
  let rest = raw.slice(sep + 3);
  let query = '';
  const q = rest.indexOf('?');
  if (q >= 0) [rest, query] = [rest.slice(0, q), rest.slice(q + 1)];
  if (rest.includes('#')) throw new RedisUrlError('a fragment (#) has no meaning');
  let authority = rest;
  let path = '';
  const slash = rest.indexOf('/');
  if (slash >= 0) [authority, path] = [rest.slice(0, slash), rest.slice(slash)];
  const at = authority.lastIndexOf('@');
  if (at >= 0) {
    const info = authority.slice(0, at);
    const colon = info.indexOf(':');
    u.username = unescape(colon >= 0 ? info.slice(0, colon) : info, 'user name');
    u.password = colon >= 0 ? unescape(info.slice(colon + 1), 'password') : '';
    authority = authority.slice(at + 1);
  }
  const port = u.sentinel ? 26379 : 6379;
  u.addrs = authority.split(',').map((h) => hostPort(h, port, u.sentinel));
  if (!u.sentinel && u.addrs.length > 1) {
    throw new RedisUrlError(`a ${scheme.toLowerCase()}:// URL names one server; list several sentinels with redis+sentinel://`);
  }
  let segs = path.replace(/^\/+|\/+$/g, '').split('/');
  if (segs.length === 1 && segs[0] === '') segs = [];
  if (u.sentinel) {
    if (segs.length === 0) throw new RedisUrlError("a sentinel URL needs the master's name as its path (/mymaster or /mymaster/0)");
    let m = '';
    try { m = decodeURIComponent(segs[0]); } catch { m = ''; }
    if (m === '' || /[ \t\r\n]/.test(m)) throw new RedisUrlError("the master's name is empty or malformed");
    u.master = m;
    segs = segs.slice(1);
  }
  if (segs.length === 1) {
    if (!/^[0-9]+$/.test(segs[0])) throw new RedisUrlError('the database must be a number of 0 or more');
    u.db = Number(segs[0]);
  } else if (segs.length > 1) {
    throw new RedisUrlError('too many path segments (want /db, or /master/db for a sentinel URL)');
  }
  parseQuery(u, query);
  return u;
}

/** Returns the URL with every password replaced by "xxxxx": what logs and errors may show. */
export function redactRedisUrl(raw: string): string {
  let u: RedisUrl;
  try {
    u = parseRedisUrl(raw);
  } catch {
    return '(a redis URL that does not parse)';
  }
  const scheme = (u.tls ? 'rediss' : 'redis') + (u.sentinel ? '+sentinel' : '');
  const esc = (s: string) => encodeURIComponent(s);
  const auth = u.username || u.password ? `${esc(u.username)}:${u.password ? 'xxxxx' : ''}@` : '';
  const hosts = u.addrs.map((a) => (a.host.includes(':') ? `[${a.host}]:${a.port}` : `${a.host}:${a.port}`)).join(',');
  const params = [u.sentinelUsername && `sentinel_username=${esc(u.sentinelUsername)}`, u.sentinelPassword && 'sentinel_password=xxxxx'].filter(Boolean);
  return `${scheme}://${auth}${hosts}${u.sentinel ? '/' + esc(u.master) : ''}/${u.db}${params.length ? '?' + params.join('&') : ''}`;
}

/**
 * The ioredis options for a URL: one server, or a Sentinel deployment
 * (ioredis asks the sentinels for the primary of master, and again after a
 * failover). Timeouts bound every connection and command: a Redis that is
 * down makes calls fail, not hang.
 */
export function redisOptions(u: RedisUrl, timeouts: { connectTimeoutMs?: number; commandTimeoutMs?: number } = {}): RedisOptions {
  const opts: RedisOptions = {
    db: u.db,
    username: u.username || undefined,
    password: u.password || undefined,
    connectTimeout: timeouts.connectTimeoutMs ?? 5000,
    commandTimeout: timeouts.commandTimeoutMs ?? 10000,
    maxRetriesPerRequest: 2,
    lazyConnect: true,
    // The ready check runs INFO, which the documented consumer user may
    // not (NOPERM): ioredis would log a line for it on every connection.
    // A connection is ready once it is authenticated.
    enableReadyCheck: false,
  };
  if (u.sentinel) {
    opts.sentinels = u.addrs.map((a) => ({ host: a.host, port: a.port }));
    opts.name = u.master;
    opts.sentinelUsername = u.sentinelUsername || undefined;
    opts.sentinelPassword = u.sentinelPassword || undefined;
    // A write that reaches a primary demoted by a failover is answered
    // READONLY: reconnect (the sentinels name the new primary) and send it
    // again there.
    // +switch-master on the sentinels moves the client to the new primary
    // at once, rather than at its next connection error.
    opts.failoverDetector = true;
    opts.reconnectOnError = (err) => (err.message.startsWith('READONLY') ? 2 : false);
    if (u.tls) {
      opts.tls = {};
      opts.enableTLSForSentinelMode = true;
      opts.sentinelTLS = {};
    }
  } else {
    opts.host = u.addrs[0].host;
    opts.port = u.addrs[0].port;
    if (u.tls) opts.tls = { servername: u.addrs[0].host };
  }
  return opts;
}

/** How many replicas a write that matters waits for (WAIT), and how long one WAIT may take. */
export interface WaitPolicy {
  replicas: number;
  timeoutMs: number;
}

/**
 * Reads REDIS_WAIT_REPLICAS and REDIS_WAIT_TIMEOUT (undefined or "" when
 * unset) for a client whose Redis URL is u: one replica for a sentinel
 * URL, none otherwise; 500 ms. Throws RedisUrlError on a bad value.
 */
export function parseWaitPolicy(replicas: string | undefined, timeout: string | undefined, u: RedisUrl): WaitPolicy {
  const p: WaitPolicy = { replicas: u.sentinel ? 1 : 0, timeoutMs: 500 };
  if (replicas) {
    const t = replicas.trim();
    const n = /^[0-9]+$/.test(t) ? Number(t) : NaN;
    if (!(n >= 0 && n <= 100)) throw new RedisUrlError('REDIS_WAIT_REPLICAS: want a number of replicas from 0 to 100');
    p.replicas = n;
  }
  if (timeout) {
    const ms = parseDurationMs(timeout.trim());
    if (!(ms > 0 && ms <= 60000)) throw new RedisUrlError('REDIS_WAIT_TIMEOUT: want a duration above 0 and at most 1m (or milliseconds)');
    p.timeoutMs = ms;
  }
  return p;
}

const units: Record<string, number> = { ns: 1e-6, us: 1e-3, 'µs': 1e-3, ms: 1, s: 1000, m: 60000, h: 3600000 };

/** A Go duration ("500ms", "1m30s") or a number of milliseconds; NaN when neither. */
function parseDurationMs(s: string): number {
  if (/^[0-9]+$/.test(s)) return Number(s);
  const re = /([0-9]*\.?[0-9]+)(ns|us|µs|ms|s|m|h)/gy;
  let total = 0;
  let end = 0;
  for (let m = re.exec(s); m; m = re.exec(s)) {
    total += Number(m[1]) * units[m[2]];
    end = re.lastIndex;
  }
  return end === s.length && end > 0 ? total : NaN;
}
