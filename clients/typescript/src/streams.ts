// The client's use of Redis streams: a document added (confirmed by WAIT
// when the policy asks), where a reader starts, and the decoding of what
// it reads (PROTOCOL.md, "Conventions": one field, data, per entry).
import type { Redis } from 'ioredis';
import { AgentvisorError, redisError } from './errors.js';
import { primaryToRead, sentinelTimeoutMs, within } from './primary.js';
import type { WaitPolicy } from './redisurl.js';
import type { Lifecycle, Output, PermissionRequest, Progress } from './types.js';

/** Every XADD carries MAXLEN ~ this (the runtime's STREAM_MAXLEN default). */
export const streamMaxLen = 10000;

/** One decoded entry of a lifecycle or output stream, by its document's type. */
export type StreamEvent =
  | { type: 'lifecycle'; stream: string; id: string; doc: Lifecycle }
  | { type: 'progress'; stream: string; id: string; doc: Progress }
  | { type: 'output'; stream: string; id: string; doc: Output }
  | { type: 'permission_request'; stream: string; id: string; doc: PermissionRequest }
  /** An entry that could not be decoded: data as read, error says why. */
  | { type: 'invalid'; stream: string; id: string; data: string; error: string };

const required: Record<string, string[]> = {
  lifecycle: ['worker_id', 'event', 'source', 'timestamp'],
  progress: ['worker_id', 'request_id', 'step', 'timestamp'],
  output: ['request_id', 'worker_id', 'status', 'usage', 'timestamp'],
  permission_request: ['worker_id', 'request_id', 'permission_id', 'tool', 'timestamp'],
};

/** Decodes one entry (its field/value list as XREAD returns it). */
export function decodeEntry(stream: string, id: string, fields: string[]): StreamEvent {
  let data = '';
  for (let i = 0; i + 1 < fields.length; i += 2) if (fields[i] === 'data') data = fields[i + 1];
  const invalid = (error: string): StreamEvent => ({ type: 'invalid', stream, id, data, error });
  if (data === '') return invalid('the entry has no data field');
  let doc: Record<string, unknown>;
  try {
    doc = JSON.parse(data);
  } catch (e) {
    return invalid(`not JSON: ${(e as Error).message}`);
  }
  if (doc === null || typeof doc !== 'object' || Array.isArray(doc)) return invalid('not a JSON object');
  if (doc.v !== 1) return invalid(`unknown version ${JSON.stringify(doc.v)}`);
  const type = doc.type;
  if (typeof type !== 'string' || !(type in required)) return invalid(`unexpected entry type ${JSON.stringify(type)} on ${stream}`);
  for (const f of required[type]) {
    if (doc[f] === undefined || doc[f] === null) return invalid(`decode ${type}: field ${f}: required`);
  }
  return { type, stream, id, doc } as unknown as StreamEvent;
}

type XReadReply = [string, [string, string[]][]][] | null;

/** Reads, after the given ids, the entries of several streams, blocking up to blockMs; [] when none came. */
export async function readStreams(r: Redis, cursors: Map<string, string>, blockMs: number, count: number): Promise<[string, [string, string[]][]][]> {
  const keys = [...cursors.keys()];
  const ids = keys.map((k) => cursors.get(k)!);
  const res = (await r.xread('COUNT', count, 'BLOCK', Math.max(1, Math.round(blockMs)), 'STREAMS', ...keys, ...ids)) as XReadReply;
  return res ?? [];
}

/** The id of a stream's last entry ("0-0" when it has none): a reader after it sees only what comes next. */
export async function lastId(r: Redis, stream: string): Promise<string> {
  const msgs = await r.xrevrange(stream, '+', '-', 'COUNT', 1);
  return msgs.length === 1 ? msgs[0][0] : '0-0';
}

const sleep = (ms: number) => new Promise((res) => setTimeout(res, ms));

/**
 * Whether the primary has entry id of stream, read where primaryToRead
 * says; throws while it says not yet (the caller looks again later), and
 * when the look is not done by end (a Date.now() time).
 */
async function onPrimary(r: Redis, stream: string, id: string, end: number): Promise<boolean> {
  const left = Math.max(1, end - Date.now());
  let on: Redis | null = null;
  const look = async () => {
    on = await primaryToRead(r, Math.min(sentinelTimeoutMs, left));
    if (on === null) throw new Error('no primary to look on yet: a sentinel is failing it over, or none answers');
    try {
      return (await on.xrange(stream, id, id)).length > 0;
    } finally {
      if (on !== r) on.disconnect();
    }
  };
  return within(look(), left, () => {
    if (on !== null && on !== r) on.disconnect(); // fails the read still waiting on it
    throw new Error(`the look for ${id} was not done within ${left} ms`);
  });
}

/**
 * Adds a document to a stream, confirmed by WAIT when the policy asks: a
 * failover neither loses it nor, as far as a look at the new primary can
 * tell, adds it twice (redisconn.XAdd in Go). The look is made on the
 * primary primaryToRead names, again after a backoff while it says not yet.
 * A primary with no replica in sync keeps the entry: nothing more to wait
 * for. Gives up after deadlineMs with UPSTREAM_UNAVAILABLE.
 */
export async function sendDoc(r: Redis, wait: WaitPolicy, stream: string, doc: object, what: string, deadlineMs = 30000): Promise<string> {
  const data = JSON.stringify(doc);
  const add = (p: ReturnType<Redis['pipeline']>) => p.xadd(stream, 'MAXLEN', '~', streamMaxLen, '*', 'data', data);
  try {
    if (wait.replicas <= 0) return (await r.xadd(stream, 'MAXLEN', '~', streamMaxLen, '*', 'data', data)) as string;
  } catch (e) {
    throw redisError(e, what);
  }
  const end = Date.now() + deadlineMs;
  let id = '';
  let lastErr: unknown;
  for (let back = 100; Date.now() < end; back = Math.min(2 * back, 2000)) {
    try {
      if (id !== '' && (await onPrimary(r, stream, id, end))) return id; // on the primary reached after a failover
      const p = add(r.pipeline());
      p.call('WAIT', wait.replicas, wait.timeoutMs);
      const res = (await p.exec()) ?? [];
      const [addErr, newId] = res[0] ?? [new Error('no reply')];
      if (addErr) throw addErr;
      id = newId as string;
      const [waitErr, acked] = res[1] ?? [new Error('no reply')];
      if (!waitErr && Number(acked) >= wait.replicas) return id;
      if (!waitErr) {
        // Answered short: a look a WAIT timeout later tells a live primary
        // (it has the entry: no replica in sync, keep it) from an old one.
        await sleep(wait.timeoutMs);
        if (await onPrimary(r, stream, id, end)) return id;
        id = '';
        continue;
      }
      lastErr = waitErr;
    } catch (e) {
      lastErr = e;
    }
    await sleep(back);
  }
  throw new AgentvisorError('UPSTREAM_UNAVAILABLE', `${what}: not confirmed within ${deadlineMs} ms: ${lastErr instanceof Error ? lastErr.message : String(lastErr)}`, { cause: lastErr });
}
