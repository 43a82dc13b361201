// The primary that a look for an entry reads (sendDoc, after a WAIT that
// answered short or failed), as redisconn's namedPrimary picks it in Go.
import { Redis, ReplyError, type RedisOptions } from 'ioredis';

/** A primary as one sentinel names it, with the configuration epoch it knows it under (0 when it may not say). */
export interface Named {
  host: string;
  port: number;
  epoch: number;
  failing: boolean;
}

const addr = (n: Named) => `${n.host}:${n.port}`;

/** The longest a look waits on one sentinel, to connect and for each reply: a sentinel that accepts and never answers costs this, not the client's commandTimeout. */
export const sentinelTimeoutMs = 3000;

/**
 * What a look reads: r itself for one server; for a client of sentinels, a
 * connection of its own (the caller disconnects it) to the primary
 * namedPrimary picks from their answers, since r may still be connected to
 * the old one. null, "not yet", when namedPrimary names none. The
 * sentinels are asked at once, each waited on at most timeoutMs.
 */
export async function primaryToRead(r: Redis, timeoutMs = sentinelTimeoutMs): Promise<Redis | null> {
  const o = r.options;
  if (!o.sentinels?.length || !o.name) return r;
  const answers = await Promise.all(o.sentinels.map((s) => askSentinel(o, s.host ?? 'localhost', s.port ?? 26379, timeoutMs)));
  const best = namedPrimary(answers);
  if (best === null) return null;
  // The data connection's user, password, db and TLS (ioredis uses tls for
  // the primary of sentinels only with enableTLSForSentinelMode); no retries:
  // the look is retried.
  const direct = new Redis({
    host: best.host, port: best.port, username: o.username, password: o.password, db: o.db,
    tls: o.enableTLSForSentinelMode ? o.tls : undefined,
    connectTimeout: o.connectTimeout, commandTimeout: o.commandTimeout,
    maxRetriesPerRequest: 0, retryStrategy: () => null, lazyConnect: true,
  });
  direct.on('error', () => {}); // reported by the call that fails
  return direct;
}

/**
 * The primary among every sentinel's answer (null: it gave none): the one
 * named under the newest configuration epoch (a sentinel that has not heard
 * of a failover names the old primary under an older one), then by most of
 * them, then the lowest address. null while one of them is failing the
 * master over (from the promotion of a replica to the end of the failover
 * the old primary still takes writes and answers reads, and drops them when
 * it is demoted), or when none answered.
 */
export function namedPrimary(answers: (Named | null)[]): Named | null {
  const votes = new Map<string, { n: Named; votes: number }>();
  for (const n of answers) {
    if (n === null) continue;
    if (n.failing) return null;
    const key = `${n.epoch} ${addr(n)}`;
    const v = votes.get(key) ?? { n, votes: 0 };
    v.votes++;
    votes.set(key, v);
  }
  const [best] = [...votes.values()].sort((a, b) => b.n.epoch - a.n.epoch || b.votes - a.votes || (addr(a.n) < addr(b.n) ? -1 : 1));
  return best?.n ?? null;
}

/**
 * What p settles to, or late() when it has not within ms (p is left to
 * settle on its own).
 */
export async function within<T>(p: Promise<T>, ms: number, late: () => T): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<T>((resolve, reject) => {
    timer = setTimeout(() => {
      try {
        resolve(late());
      } catch (e) {
        reject(e);
      }
    }, ms);
  });
  try {
    return await Promise.race([p, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Asks one sentinel for the primary of o.name and whether it is failing it
 * over; null when it does not say within timeoutMs (ioredis's connect waits
 * for replies of its own before the question is sent).
 */
async function askSentinel(o: RedisOptions, host: string, port: number, timeoutMs: number): Promise<Named | null> {
  const s = new Redis({
    host, port, username: o.sentinelUsername, password: o.sentinelPassword, tls: o.sentinelTLS,
    connectTimeout: timeoutMs, commandTimeout: timeoutMs,
    maxRetriesPerRequest: 0, retryStrategy: () => null, enableReadyCheck: false, lazyConnect: true,
  });
  s.on('error', () => {});
  try {
    return await within(ask(s, o.name!).catch(() => null), timeoutMs, () => null);
  } finally {
    s.disconnect();
  }
}

async function ask(s: Redis, name: string): Promise<Named | null> {
  await s.connect();
  try {
    const kv = (await s.call('SENTINEL', 'MASTER', name)) as string[];
    const m = new Map<string, string>();
    for (let i = 0; i + 1 < kv.length; i += 2) m.set(kv[i], kv[i + 1]);
    if (m.get('ip') && m.get('port')) {
      return { host: m.get('ip')!, port: Number(m.get('port')), epoch: Number(m.get('config-epoch')) || 0, failing: (m.get('flags') ?? '').includes('failover_in_progress') };
    }
  } catch (e) {
    // A sentinel user not allowed SENTINEL MASTER (an error reply) is asked
    // for the address alone; one that did not answer is not asked again.
    if (!(e instanceof ReplyError)) throw e;
  }
  const hp = (await s.call('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', name)) as string[] | null;
  return hp?.length === 2 ? { host: hp[0], port: Number(hp[1]), epoch: 0, failing: false } : null;
}
