// Commands to the worker-managers and their replies (PROTOCOL.md,
// "Commands and replies"): a command on <prefix>:commands names a reply
// stream under <prefix>:replies:, where the manager answers with the same
// command_id.
import { AgentvisorError, redisError } from './errors.js';
import { type CallOptions, type Conn, checkId, checkSignal, randomId, withReader } from './conn.js';
import { decodeReply } from './decode.js';
import { lastId, readStreams, sendDoc } from './streams.js';
import type { Command, Reply } from './types.js';

/** A command as the caller gives it: the client fills in v, type, command_id (unless given), reply_to, timestamp and deadline. */
export type CommandInput = Omit<Command, 'v' | 'type' | 'command_id' | 'reply_to' | 'timestamp' | 'deadline'> & { command_id?: string };

/** How long a command waits for its reply by default: a create may wait for a slot (6 min). */
export const defaultCommandTimeoutMs = 6 * 60 * 1000;

/** How often a sender looks whether a manager is alive while it waits. */
export const presenceEveryMs = 2000;
/** How long it looks before it says none is: a manager started a moment before writes its state within it. */
const presenceGraceMs = 2000;
/** How long a sender waits past its command's deadline: a manager that began it in time answers then. */
const replyGraceMs = 2000;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Whether a manager's state hash exists (PROTOCOL.md, "Deadlines and a
 * missing manager"); null when the user may not read them (a narrower ACL:
 * the deadline alone then guards).
 */
async function managersAlive(c: Conn): Promise<boolean | null> {
  try {
    const ids = await c.redis.smembers(c.keys.managers());
    if (ids.length === 0) return false;
    return (await c.redis.exists(...ids.map((id) => c.keys.managerState(id)))) > 0;
  } catch (e) {
    if (e instanceof Error && e.message.startsWith('NOPERM')) return null;
    throw redisError(e, "read the managers' presence");
  }
}

function noManager(c: Conn, what: string): AgentvisorError {
  return new AgentvisorError('NO_MANAGER', `no worker-manager is alive on this Redis with key prefix ${JSON.stringify(c.keys.prefix)} (start worker-manager, or check REDIS_URL and WORKER_KEY_PREFIX): ${what}`);
}

function checkCommand(cmd: Command): void {
  checkId('command_id', cmd.command_id, 'INVALID_COMMAND');
  checkId('worker_id', cmd.worker_id, 'INVALID_COMMAND', true);
  checkId('project_id', cmd.project_id, 'INVALID_COMMAND', true);
  const b = cmd.budget;
  if (b) {
    for (const [f, v] of [['limit_usd', b.limit_usd], ['warn_usd', b.warn_usd ?? 0]] as const) {
      if (typeof v !== 'number' || !(v >= 0 && v <= 1e6)) throw new AgentvisorError('INVALID_COMMAND', `field budget.${f}: is ${v}, want 0 to 1000000`);
    }
    if (b.limit_usd > 0 && (b.warn_usd ?? 0) > b.limit_usd) {
      throw new AgentvisorError('INVALID_COMMAND', `field budget.warn_usd: is ${b.warn_usd}, above the limit ${b.limit_usd}`);
    }
  }
}

/**
 * Sends a command and returns its reply; a reply that is not ok rejects
 * with an AgentvisorError of its code. The command carries timeoutMs as
 * its deadline: no manager carries it out after. With no manager alive it
 * rejects NO_MANAGER within seconds (not sent, or taken back off the
 * stream); no reply by the deadline rejects COMMAND_EXPIRED. replyName
 * names the reply stream (a random one per call when empty: it expires
 * after the manager's REPLY_TTL).
 */
export async function doCommand(c: Conn, input: CommandInput, replyName: string, opts: CallOptions = {}): Promise<Reply> {
  const stream = c.keys.replies(replyName || randomId('client', 6));
  const timeoutMs = opts.timeoutMs ?? defaultCommandTimeoutMs;
  const now = Date.now();
  const cmd = {
    v: 1, type: 'command', ...input, command_id: input.command_id || randomId('cmd'), reply_to: stream,
    timestamp: new Date(now).toISOString(), deadline: new Date(now + timeoutMs).toISOString(),
  } as Command;
  checkCommand(cmd);
  for (const grace = Date.now() + presenceGraceMs; (await managersAlive(c)) === false;) {
    if (Date.now() >= grace) throw noManager(c, 'the command was not sent');
    checkSignal(opts.signal);
    await sleep(200);
  }
  const deadline = now + timeoutMs + replyGraceMs;
  return withReader(c, async (r) => {
    // Replies after the stream's last entry before the command: "$" would
    // miss a reply written between the XADD and the first XREAD.
    let last: string;
    try {
      last = await lastId(r, stream);
    } catch (e) {
      throw redisError(e, 'reply stream');
    }
    const entry = await sendDoc(c.redis, c.wait, c.keys.commands(), cmd, `send command ${cmd.command_id}`);
    let look = Date.now() + presenceEveryMs;
    let absent = 0;
    while (Date.now() < deadline) {
      checkSignal(opts.signal);
      let res;
      try {
        res = await readStreams(r, new Map([[stream, last]]), Math.min(1000, deadline - Date.now()), 100);
      } catch (e) {
        throw redisError(e, 'read reply');
      }
      for (const [, entries] of res) {
        for (const [id, fields] of entries) {
          last = id;
          const reply = decodeReply(fields);
          if (!reply || reply.command_id !== cmd.command_id) continue; // another command's (a reply may come twice: match by id)
          if (!reply.ok) {
            throw reply.error ? AgentvisorError.from(reply.error) : new AgentvisorError('INTERNAL_ERROR', `command ${cmd.command_id}: a failed reply without an error`);
          }
          return reply;
        }
      }
      if (Date.now() < look) continue;
      look = Date.now() + presenceEveryMs;
      absent = (await managersAlive(c)) === false ? absent + 1 : 0;
      if (absent >= 2) {
        // No manager holds it: taken back, so that one started later does
        // not carry it out before its deadline.
        await c.redis.xdel(c.keys.commands(), entry).catch(() => 0);
        throw noManager(c, `command ${cmd.command_id} taken back`);
      }
    }
    throw new AgentvisorError('COMMAND_EXPIRED', `no reply to ${cmd.command_id} (${cmd.action}) within ${timeoutMs} ms: a manager that reads it now does not carry it out`);
  });
}
