import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import { AgentvisorError, redisError } from './errors.js';
import type { Keys } from './keys.js';
import type { WaitPolicy } from './redisurl.js';

/** What every part of the client shares: the Redis connection, the key names, WAIT's policy. */
export interface Conn {
  redis: Redis;
  keys: Keys;
  wait: WaitPolicy;
}

/** Options of every call that may wait: a time limit and a signal that ends it early. */
export interface CallOptions {
  /** How long the call may take, in milliseconds (each call has its own default). */
  timeoutMs?: number;
  /** Ends the call early: it rejects with the signal's reason. */
  signal?: AbortSignal;
}

/** A random id with a prefix: cmd-1f2e..., client-9a8b... */
export function randomId(prefix: string, bytes = 8): string {
  return `${prefix}-${randomBytes(bytes).toString('hex')}`;
}

const idRe = /^[^\s\p{Cc}]+$/u;

/** Checks an identifier of PROTOCOL.md ("Conventions"): 1 to 200 bytes, no white space or control characters. */
export function checkId(field: string, v: unknown, code: 'INVALID_TASK' | 'INVALID_COMMAND', optional = false): void {
  if (v === undefined || v === '') {
    if (optional) return;
    throw new AgentvisorError(code, `field ${field}: required`);
  }
  if (typeof v !== 'string' || Buffer.byteLength(v) > 200 || !idRe.test(v)) {
    throw new AgentvisorError(code, `field ${field}: not an identifier (1 to 200 bytes, no white space or control characters)`);
  }
}

/**
 * A connection of its own for blocking reads (XREAD BLOCK holds its
 * connection: on the shared one it would hold back every other call),
 * closed when fn ends.
 */
export async function withReader<T>(c: Conn, fn: (r: Redis) => Promise<T>): Promise<T> {
  const r = c.redis.duplicate({ lazyConnect: true });
  r.on('error', () => {}); // reported by the call that fails
  try {
    await r.connect();
  } catch (e) {
    r.disconnect();
    throw redisError(e, 'connect a reader');
  }
  try {
    return await fn(r);
  } finally {
    r.disconnect();
  }
}

/** Throws the signal's reason when it is aborted. */
export function checkSignal(signal?: AbortSignal): void {
  if (signal?.aborted) throw signal.reason ?? new Error('aborted');
}
