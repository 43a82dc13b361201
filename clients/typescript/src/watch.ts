// Follows worker:lifecycle and the output streams of the workers (their
// progress, permission requests and outputs): those that exist when the
// watch starts and those created while it runs, and the developer queue's
// output stream. No consumer group: any number of watchers see every entry.
import { redisError } from './errors.js';
import type { Conn } from './conn.js';
import { type StreamEvent, decodeEntry, lastId, readStreams } from './streams.js';
import type { Redis } from 'ioredis';

export interface WatchOptions {
  /** Replays what the streams hold before following them; otherwise only entries added after the watch starts. */
  fromStart?: boolean;
  /** Restricts the streams to these workers (the lifecycle stream is filtered to them too); empty: every worker. */
  workers?: string[];
  /** How often the workers set is read for new workers (default 1000 ms); a lifecycle "created" event adds its worker at once. */
  rescanMs?: number;
  /** Ends the watch (the iterator then returns). */
  signal?: AbortSignal;
  /** Ends the watch after this long, in milliseconds (the iterator then returns); no limit by default. */
  timeoutMs?: number;
}

class Cursors {
  readonly ids = new Map<string, string>();
  constructor(private r: Redis) {}
  async add(stream: string, fromStart: boolean): Promise<void> {
    if (this.ids.has(stream)) return;
    this.ids.set(stream, fromStart ? '0-0' : await lastId(this.r, stream));
  }
}

/** Yields every entry, in stream order per stream, until the signal aborts or the time is up. */
export async function* watchStreams(c: Conn, opts: WatchOptions = {}): AsyncGenerator<StreamEvent, void, undefined> {
  const only = new Set(opts.workers ?? []);
  const end = opts.timeoutMs ? Date.now() + opts.timeoutMs : Infinity;
  const rescanMs = opts.rescanMs ?? 1000;
  const r = c.redis.duplicate({ lazyConnect: true });
  r.on('error', () => {});
  const cursors = new Cursors(r);
  const scan = async (fromStart: boolean) => {
    const ids = only.size > 0 ? [...only] : await r.smembers(c.keys.workers());
    for (const id of ids) await cursors.add(c.keys.output(id), fromStart);
  };
  try {
    try {
      await r.connect();
      await cursors.add(c.keys.lifecycle(), !!opts.fromStart);
      if (only.size === 0) await cursors.add(c.keys.developerOutput(), !!opts.fromStart);
      await scan(!!opts.fromStart);
    } catch (e) {
      throw redisError(e, 'watch');
    }
    let lastScan = Date.now();
    while (!opts.signal?.aborted && Date.now() < end) {
      let res;
      try {
        if (Date.now() - lastScan >= rescanMs) {
          await scan(true); // a worker found now was created after the watch started: all its entries are new
          lastScan = Date.now();
        }
        res = await readStreams(r, cursors.ids, Math.min(200, end - Date.now()), 100);
      } catch (e) {
        if (opts.signal?.aborted) return;
        throw redisError(e, 'watch');
      }
      for (const [stream, entries] of res) {
        for (const [id, fields] of entries) {
          cursors.ids.set(stream, id);
          const ev = decodeEntry(stream, id, fields);
          if (ev.type === 'lifecycle') {
            if (only.size > 0 && !only.has(ev.doc.worker_id)) continue;
            if (only.size === 0 && ev.doc.event === 'created') await cursors.add(c.keys.output(ev.doc.worker_id), true);
          }
          yield ev;
        }
      }
    }
  } finally {
    r.disconnect();
  }
}
