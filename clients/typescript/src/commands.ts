// Commands to the worker-managers and their replies (PROTOCOL.md,
// "Commands and replies"): a command on <prefix>:commands names a reply
// stream under <prefix>:replies:, where the manager answers with the same
// command_id.
import { AgentvisorError, redisError } from './errors.js';
import { type CallOptions, type Conn, checkId, checkSignal, randomId, withReader } from './conn.js';
import { decodeReply } from './decode.js';
import { lastId, readStreams, sendDoc } from './streams.js';
import type { Command, Reply } from './types.js';

/** A command as the caller gives it: the client fills in v, type, command_id (unless given), reply_to and timestamp. */
export type CommandInput = Omit<Command, 'v' | 'type' | 'command_id' | 'reply_to' | 'timestamp'> & { command_id?: string };

/** How long a command waits for its reply by default: a create may wait for a slot (6 min). */
export const defaultCommandTimeoutMs = 6 * 60 * 1000;

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
 * with an AgentvisorError of its code, no reply within timeoutMs with
 * UPSTREAM_UNAVAILABLE. replyName names the reply stream (a random one per
 * call when empty: it expires after the manager's REPLY_TTL).
 */
export async function doCommand(c: Conn, input: CommandInput, replyName: string, opts: CallOptions = {}): Promise<Reply> {
  const stream = c.keys.replies(replyName || randomId('client', 6));
  const cmd = { v: 1, type: 'command', ...input, command_id: input.command_id || randomId('cmd'), reply_to: stream, timestamp: new Date().toISOString() } as Command;
  checkCommand(cmd);
  const timeoutMs = opts.timeoutMs ?? defaultCommandTimeoutMs;
  const deadline = Date.now() + timeoutMs;
  return withReader(c, async (r) => {
    // Replies after the stream's last entry before the command: "$" would
    // miss a reply written between the XADD and the first XREAD.
    let last: string;
    try {
      last = await lastId(r, stream);
    } catch (e) {
      throw redisError(e, 'reply stream');
    }
    await sendDoc(c.redis, c.wait, c.keys.commands(), cmd, `send command ${cmd.command_id}`);
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
    }
    throw new AgentvisorError('UPSTREAM_UNAVAILABLE', `no reply to ${cmd.command_id} (${cmd.action}) within ${timeoutMs} ms`);
  });
}
