// Tasks on workers' input streams, followed to their output (PROTOCOL.md,
// "Task", "Cancel", "Message", "Approval", "Output", "Progress", "Run
// hash"). Reads go without a consumer group: any number of clients may
// await the same task.
import { AgentvisorError, redisError } from './errors.js';
import { type CallOptions, type Conn, checkId, checkSignal, randomId } from './conn.js';
import { type StreamEvent, decodeEntry, readStreams, sendDoc } from './streams.js';
import { type Priority, priorities } from './keys.js';
import type { Cancel, Kind, Message, Output, PermissionReply, PermissionRequest, Progress, Task } from './types.js';

/** A task as the caller gives it; requestId is made when absent. */
export interface TaskInput {
  prompt: string;
  requestId?: string;
  taskId?: string;
  /** Sessions belong to a project; absent means "default". */
  projectId?: string;
  forceNewSession?: boolean;
  /** Overrides the worker's task timeout (0 to 86400; 0 keeps it). */
  timeoutSeconds?: number;
  /** The request id of a blocked run this task answers (its session continues). */
  answers?: string;
  /** What the task may spend on model calls, in US dollars. */
  maxBudgetUsd?: number;
  /** Ask to be run again after a retryable failure: attempts in all, ms before each retry; {} takes the operator's defaults (4; 1000, 2000, 4000). */
  retry?: { attempts?: number; backoffMs?: number[] };
  /** What started the task ("manual", "cron"), kept on its run. */
  trigger?: string;
  /** Picks a developer worker's queue (absent: normal); a long-lived worker ignores it. */
  priority?: Priority;
  metadata?: Record<string, unknown>;
}

/** A task on its way: where its output will appear, and the entry of that stream after which to look for it. */
export interface SentTask {
  requestId: string;
  workerId: string;
  /** The input stream the task went to. */
  input: string;
  /**
   * Where the task's cancel, messages and permission replies go: the
   * worker's input, or the normal developer queue for a developer task of
   * any priority (absent in a SentTask made by hand: input).
   */
  control?: string;
  /** The output stream the worker answers on. */
  output: string;
  /** The output stream's last entry id before the send. */
  after: string;
}

/** What a task's output stream says of it: progress, permission requests, then its one output. */
export type TaskEvent = Extract<StreamEvent, { type: 'progress' | 'permission_request' | 'output' }>;

/** Options of awaiting a task: a time limit (default 30 min), a signal, and a callback for each progress event. */
export interface AwaitOptions extends CallOptions {
  onProgress?: (p: Progress) => void;
  onPermissionRequest?: (p: PermissionRequest) => void;
}

/** How long a task is awaited by default. */
export const defaultAwaitTimeoutMs = 30 * 60 * 1000;

/** Rejects an await whose time limit passed before the task's output came (code UPSTREAM_UNAVAILABLE: nothing answered in time). */
export class AwaitTimeoutError extends AgentvisorError {
  constructor(requestId: string, timeoutMs: number) {
    super('UPSTREAM_UNAVAILABLE', `task ${requestId}: no output within ${timeoutMs} ms`);
    this.name = 'AwaitTimeoutError';
  }
}

/** The wire document of a task input, checked as the worker would (INVALID_TASK). */
export function taskDoc(t: TaskInput): Task {
  const doc: Task = { v: 1, type: 'task', request_id: t.requestId || randomId(`task-${Date.now()}`, 4), prompt: t.prompt };
  if (t.taskId) doc.task_id = t.taskId;
  if (t.projectId) doc.project_id = t.projectId;
  if (t.forceNewSession) doc.force_new_session = true;
  if (t.timeoutSeconds !== undefined) doc.timeout_seconds = t.timeoutSeconds;
  if (t.answers) doc.answers = t.answers;
  if (t.maxBudgetUsd !== undefined) doc.max_budget_usd = t.maxBudgetUsd;
  if (t.retry !== undefined) {
    doc.retry = {};
    if (t.retry.attempts !== undefined) doc.retry.attempts = t.retry.attempts;
    if (t.retry.backoffMs !== undefined) doc.retry.backoff_ms = t.retry.backoffMs;
  }
  if (t.trigger) doc.trigger = t.trigger;
  if (t.priority !== undefined) doc.priority = t.priority;
  if (t.metadata !== undefined) doc.metadata = t.metadata;
  for (const f of ['request_id', 'task_id', 'project_id', 'answers'] as const) checkId(f, doc[f], 'INVALID_TASK', f !== 'request_id');
  const size = typeof doc.prompt === 'string' ? Buffer.byteLength(doc.prompt) : 0;
  if (size < 1 || size > 1 << 20) throw new AgentvisorError('INVALID_TASK', 'field prompt: want 1 B to 1 MiB of text');
  const ts = doc.timeout_seconds;
  if (ts !== undefined && !(Number.isInteger(ts) && ts >= 0 && ts <= 86400)) throw new AgentvisorError('INVALID_TASK', `field timeout_seconds: is ${ts}, want an integer from 0 to 86400`);
  const mb = doc.max_budget_usd;
  if (mb !== undefined && !(typeof mb === 'number' && mb >= 0 && mb <= 1e6)) throw new AgentvisorError('INVALID_TASK', `field max_budget_usd: is ${mb}, want 0 to 1000000`);
  if (doc.priority !== undefined && !priorities.includes(doc.priority)) {
    throw new AgentvisorError('INVALID_TASK', `field priority: is ${JSON.stringify(doc.priority)}, want high, normal or low`);
  }
  if (doc.metadata !== undefined && (doc.metadata === null || typeof doc.metadata !== 'object' || Array.isArray(doc.metadata))) {
    throw new AgentvisorError('INVALID_TASK', 'field metadata: want an object');
  }
  return doc;
}

// Writes a run hash (field/value pairs) unless it exists: the run exists
// from the send, requested; the wrapper moves it on, never back.
const createRunScript = `
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
`;

/**
 * Puts a task on a worker's input stream (or, for a developer worker, the
 * developer queue of its priority) and creates its run hash, requested.
 * The worker's kind comes from its status hash: a worker without one is
 * NOT_FOUND.
 */
export async function sendTask(c: Conn, workerId: string, input: TaskInput): Promise<SentTask> {
  checkId('worker_id', workerId, 'INVALID_TASK');
  const doc = taskDoc(input);
  let kind: string | null;
  let agentType: string | null;
  try {
    [kind, agentType] = await c.redis.hmget(c.keys.status(workerId), 'kind', 'agent_type');
  } catch (e) {
    throw redisError(e, `send: read worker ${workerId}`);
  }
  if (kind === null) throw new AgentvisorError('NOT_FOUND', `no worker ${workerId}`);
  const k: Kind = kind === 'developer' ? 'developer' : 'long_lived';
  const sent: SentTask = {
    requestId: doc.request_id, workerId, input: c.keys.inputFor(k, workerId, doc.priority),
    control: c.keys.inputFor(k, workerId), output: c.keys.outputFor(k, workerId), after: '0-0',
  };
  const now = new Date().toISOString();
  // One round trip: the output stream's last entry (outputs after it are
  // the task's) and the run.
  const p = c.redis.pipeline();
  p.xrevrange(sent.output, '+', '-', 'COUNT', 1);
  p.eval(createRunScript, 1, c.keys.run(doc.request_id),
    'request_id', doc.request_id, 'task_id', doc.task_id ?? '', 'worker_id', k === 'developer' ? '' : workerId,
    'project_id', doc.project_id || 'default', 'agent_slug', agentType ?? '', 'trigger', doc.trigger ?? '',
    'status', 'requested', 'created_at', now, 'updated_at', now);
  let res;
  try {
    res = (await p.exec()) ?? [];
  } catch (e) {
    throw redisError(e, `send: output stream of ${workerId} and run ${doc.request_id}`);
  }
  for (const [err] of res) if (err) throw redisError(err, `send: output stream of ${workerId} and run ${doc.request_id}`);
  const last = res[0]?.[1] as [string, string[]][] | undefined;
  if (last && last.length === 1) sent.after = last[0][0];
  await sendDoc(c.redis, c.wait, sent.input, doc, `send: task ${doc.request_id} to ${workerId}`);
  return sent;
}

/** Where the task's cancel, messages and permission replies go. */
function controlOf(s: SentTask): string {
  return s.control || s.input;
}

/** Asks the worker to end the task, queued or running: its output is then cancelled, unless it ended before. */
export async function cancelTask(c: Conn, s: SentTask, reason = ''): Promise<void> {
  const doc: Cancel = { v: 1, type: 'cancel', request_id: s.requestId, timestamp: new Date().toISOString() };
  if (reason) doc.reason = reason;
  if (Buffer.byteLength(reason) > 1024) throw new AgentvisorError('INVALID_COMMAND', 'cancel: field reason: at most 1024 B');
  await sendDoc(c.redis, c.wait, controlOf(s), doc, `cancel ${s.requestId}`);
}

/** Steers a running task: text the agent gets as a user message of the task's session. */
export async function sendMessage(c: Conn, s: SentTask, text: string): Promise<void> {
  const n = Buffer.byteLength(text ?? '');
  if (n < 1 || n > 65536) throw new AgentvisorError('INVALID_COMMAND', 'message: field text: want 1 B to 64 KiB');
  const doc: Message = { v: 1, type: 'message', request_id: s.requestId, text };
  await sendDoc(c.redis, c.wait, controlOf(s), doc, `message to ${s.requestId}`);
}

/** Answers a permission request of the task: allow or deny the tool call, with a message the model reads when denied. */
export async function replyPermission(c: Conn, s: SentTask, permissionId: string, allow: boolean, message = ''): Promise<void> {
  checkId('permission_id', permissionId, 'INVALID_COMMAND');
  if (Buffer.byteLength(message) > 1024) throw new AgentvisorError('INVALID_COMMAND', 'permission_reply: field message: at most 1024 B');
  const doc: PermissionReply = { v: 1, type: 'permission_reply', request_id: s.requestId, permission_id: permissionId, allow };
  if (message) doc.message = message;
  await sendDoc(c.redis, c.wait, controlOf(s), doc, `answer ${permissionId} of ${s.requestId}`);
}

/**
 * Iterates over the task's progress events and permission requests, then
 * its output, and ends. Rejects with AwaitTimeoutError when timeoutMs
 * (default 30 min) passes first, with the signal's reason when it aborts.
 */
export async function* taskEvents(c: Conn, s: SentTask, opts: CallOptions = {}): AsyncGenerator<TaskEvent, void, undefined> {
  const timeoutMs = opts.timeoutMs ?? defaultAwaitTimeoutMs;
  const deadline = Date.now() + timeoutMs;
  const r = c.redis.duplicate({ lazyConnect: true });
  r.on('error', () => {});
  try {
    await r.connect().catch((e) => { throw redisError(e, `await ${s.requestId}: connect`); });
    const cursors = new Map([[s.output, s.after || '0-0']]);
    for (;;) {
      checkSignal(opts.signal);
      const left = deadline - Date.now();
      if (left <= 0) throw new AwaitTimeoutError(s.requestId, timeoutMs);
      let res;
      try {
        res = await readStreams(r, cursors, Math.min(1000, left), 100);
      } catch (e) {
        throw redisError(e, `await ${s.requestId}`);
      }
      for (const [, entries] of res) {
        for (const [id, fields] of entries) {
          cursors.set(s.output, id);
          const ev = decodeEntry(s.output, id, fields);
          if (ev.type === 'progress' || ev.type === 'permission_request' || ev.type === 'output') {
            if (ev.doc.request_id !== s.requestId) continue;
            yield ev;
            if (ev.type === 'output') return;
          }
        }
      }
    }
  } finally {
    r.disconnect();
  }
}

/** Returns the task's output (whatever its status), calling the callbacks with what comes before it. */
export async function awaitOutput(c: Conn, s: SentTask, opts: AwaitOptions = {}): Promise<Output> {
  for await (const ev of taskEvents(c, s, opts)) {
    if (ev.type === 'output') return ev.doc;
    if (ev.type === 'progress') opts.onProgress?.(ev.doc);
    else opts.onPermissionRequest?.(ev.doc);
  }
  throw new AgentvisorError('INTERNAL_ERROR', `task ${s.requestId}: events ended without an output`);
}

