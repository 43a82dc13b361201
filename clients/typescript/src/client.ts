import { readFileSync } from 'node:fs';
import { Redis } from 'ioredis';
import { type CommandInput, doCommand } from './commands.js';
import { type CallOptions, type Conn, checkId } from './conn.js';
import { AgentvisorError, redisError } from './errors.js';
import { type ProjectBudget, type ProjectUsage, type RunRecord, type WorkerStatus, getBudget, getRun, getUsage, getWorker, listWorkerIds } from './fleet.js';
import { Keys } from './keys.js';
import { type WaitPolicy, parseRedisUrl, parseWaitPolicy, redisOptions } from './redisurl.js';
import type { StreamEvent } from './streams.js';
import {
  type AwaitOptions, type SentTask, type TaskEvent, type TaskInput,
  awaitOutput, cancelTask, replyPermission, sendMessage, sendTask, taskEvents,
} from './tasks.js';
import type { AgentTypeIn, Command, Output, PermissionRequest, Progress, Reply, ReplyWorker } from './types.js';
import { type WatchOptions, watchStreams } from './watch.js';

/** A create command's worker spec (PROTOCOL.md, "Commands and replies"), as on the wire. */
export type WireWorkerSpec = NonNullable<Command['spec']>;

/**
 * A spec's project image (its own base, Dockerfile or devcontainer.json)
 * in this client's casing: buildArgs for the wire's build_args.
 */
export interface ProjectImage extends Omit<NonNullable<WireWorkerSpec['image']>, 'build_args'> {
  buildArgs?: Record<string, string>;
}

/**
 * A worker's spec in this client's casing (camelCase, as TaskInput):
 * agentType, projectId, allowedCommands, userId, mcpServers, and
 * image.buildArgs; the other fields are one word and as on the wire.
 */
export interface WorkerSpec extends Omit<WireWorkerSpec, 'agent_type' | 'project_id' | 'allowed_commands' | 'user_id' | 'mcp_servers' | 'image'> {
  image?: ProjectImage;
  agentType: WireWorkerSpec['agent_type'];
  projectId?: WireWorkerSpec['project_id'];
  allowedCommands?: WireWorkerSpec['allowed_commands'];
  userId?: WireWorkerSpec['user_id'];
  mcpServers?: WireWorkerSpec['mcp_servers'];
}

const specNames = { agentType: 'agent_type', projectId: 'project_id', allowedCommands: 'allowed_commands', userId: 'user_id', mcpServers: 'mcp_servers' } as const;

/**
 * The wire form of a spec. The wire's own snake_case names are still
 * accepted for one release (the casing of earlier releases); a spec that
 * gives both spellings of a field is refused.
 */
export function wireSpec(spec: WorkerSpec | WireWorkerSpec): WireWorkerSpec {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(spec)) {
    const name = (specNames as Record<string, string>)[k] ?? k;
    if (name in out) throw new AgentvisorError('INVALID_COMMAND', `field spec.${name}: given twice (as ${k} and ${name})`);
    out[name] = name === 'image' ? wireImage(v as ProjectImage & NonNullable<WireWorkerSpec['image']>) : v;
  }
  return out as WireWorkerSpec;
}

function wireImage(image: ProjectImage & NonNullable<WireWorkerSpec['image']>): NonNullable<WireWorkerSpec['image']> {
  const { buildArgs, ...rest } = image;
  if (buildArgs === undefined) return rest;
  if (rest.build_args !== undefined) throw new AgentvisorError('INVALID_COMMAND', 'field spec.image.build_args: given twice (as buildArgs and build_args)');
  return { ...rest, build_args: buildArgs };
}

/** The project's Redis writes its URLs here (scripts/redis.sh); workerctl reads it too. */
export const credentialsFile = '/var/lib/agentvisor/redis/credentials.env';

/**
 * The Redis URL of a client given none: REDIS_URL, else REDIS_CONSUMER_URL
 * of the environment or of the credentials file (as workerctl reads them).
 */
export function defaultRedisUrl(env: NodeJS.ProcessEnv = process.env, path = credentialsFile): string {
  for (const name of ['REDIS_URL', 'REDIS_CONSUMER_URL']) {
    const v = env[name];
    if (v) return v;
  }
  let problem: string;
  try {
    for (const raw of readFileSync(path, 'utf8').split('\n')) {
      const line = raw.trim().replace(/^export /, '');
      const eq = line.indexOf('=');
      if (eq < 0 || line.slice(0, eq).trim() !== 'REDIS_CONSUMER_URL') continue;
      let v = line.slice(eq + 1).trim();
      if (v.length >= 2 && (v[0] === '"' || v[0] === "'") && v[v.length - 1] === v[0]) v = v.slice(1, -1);
      if (v) return v;
    }
    problem = `${path} has no REDIS_CONSUMER_URL`;
  } catch (e) {
    problem = `${path} cannot be read (${(e as NodeJS.ErrnoException).code ?? e})`;
  }
  throw new AgentvisorError('INVALID_COMMAND', `REDIS_URL is not set and ${problem} (the project's Redis: \`bash scripts/redis.sh\` writes it; or pass url)`);
}

/** A worker for a scope: deleted by `await using` at the scope's end, or by delete(). */
export interface ScopedWorker extends CreatedWorker {
  delete(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

/** What a create made: the worker's id, the manager's view of it, and the reply's warnings. */
export interface CreatedWorker {
  workerId: string;
  worker: ReplyWorker;
  warnings: string[];
}

export interface ClientOptions {
  /** redis://, rediss://, redis+sentinel:// or rediss+sentinel:// (default: REDIS_URL, else REDIS_CONSUMER_URL of the environment or of the project's credentials file). */
  url?: string;
  /** An ioredis client of the caller's instead of url (close() leaves it open). */
  redis?: Redis;
  /** The key prefix (default: WORKER_KEY_PREFIX, else "worker"). */
  prefix?: string;
  /** WAIT's policy for the writes that matter (default: REDIS_WAIT_REPLICAS and REDIS_WAIT_TIMEOUT for the URL: one replica for a sentinel URL). */
  wait?: WaitPolicy;
  /** Names the reply stream (<prefix>:replies:<name>); a random one per command when empty. */
  name?: string;
  /** How long a command waits for its reply (default 6 min: a create may wait for a slot). */
  commandTimeoutMs?: number;
  /** How long connecting to Redis may take (default 5 s). */
  connectTimeoutMs?: number;
  /** How long one Redis call may take (default 10 s). */
  redisTimeoutMs?: number;
}

/**
 * A client of the runtime: it talks to Redis only, as PROTOCOL.md
 * describes. Commands go to the worker-managers and wait for their reply;
 * tasks go to the workers' input streams and are followed on their output
 * streams. Every call that waits has a time limit; every failure is an
 * AgentvisorError with the protocol's code.
 */
export class AgentvisorClient {
  readonly keys: Keys;
  readonly redis: Redis;
  private readonly conn: Conn;
  private readonly owned: boolean;

  private constructor(redis: Redis, owned: boolean, private readonly opts: ClientOptions, wait: WaitPolicy) {
    this.redis = redis;
    this.owned = owned;
    this.keys = new Keys(opts.prefix ?? process.env.WORKER_KEY_PREFIX ?? '');
    this.conn = { redis, keys: this.keys, wait };
  }

  /** Connects to the runtime's Redis; rejects with REDIS_AUTH_FAILED when Redis refuses the credentials, UPSTREAM_UNAVAILABLE when it cannot be reached. */
  static async connect(opts: ClientOptions = {}): Promise<AgentvisorClient> {
    if (opts.redis) {
      return new AgentvisorClient(opts.redis, false, opts, opts.wait ?? { replicas: 0, timeoutMs: 500 });
    }
    const u = parseRedisUrl(opts.url || defaultRedisUrl());
    const wait = opts.wait ?? parseWaitPolicy(process.env.REDIS_WAIT_REPLICAS, process.env.REDIS_WAIT_TIMEOUT, u);
    const redis = new Redis(redisOptions(u, { connectTimeoutMs: opts.connectTimeoutMs, commandTimeoutMs: opts.redisTimeoutMs }));
    // Reported by the call that fails. The first is kept: a refused
    // password ends the connection, and connect() then rejects with
    // "Connection is closed", which would hide why.
    let first: unknown;
    redis.on('error', (e) => { first ??= e; });
    try {
      await redis.connect();
      await redis.ping(); // the first command is where a refused password shows
    } catch (e) {
      redis.disconnect();
      throw redisError(first ?? e, 'connect to Redis');
    }
    return new AgentvisorClient(redis, true, opts, wait);
  }

  /** Closes the connection (unless the caller gave its own). */
  async close(): Promise<void> {
    if (!this.owned) return;
    await this.redis.quit().catch(() => {});
    this.redis.disconnect(); // also ends a sentinel URL's failover detector, which quit leaves subscribed
  }

  /** close(), for `await using client = await AgentvisorClient.connect()`. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  // Commands.

  /** Sends any command and returns its reply; a reply that is not ok rejects with its code. */
  command(cmd: CommandInput, opts: CallOptions = {}): Promise<Reply> {
    return doCommand(this.conn, cmd, this.opts.name ?? '', { timeoutMs: this.opts.commandTimeoutMs, ...opts });
  }

  /**
   * Creates a worker; resolves when its container runs (a create may wait
   * for a slot: RESOURCE_EXHAUSTED). The spec is camelCase (agentType,
   * projectId); the wire's snake_case is accepted for one release.
   */
  async createWorker(spec: WorkerSpec | WireWorkerSpec, opts: CallOptions = {}): Promise<CreatedWorker> {
    const r = await this.command({ action: 'create', spec: wireSpec(spec) }, opts);
    if (!r.worker_id || !r.worker) throw new AgentvisorError('INTERNAL_ERROR', 'create: a reply without the worker');
    return { workerId: r.worker_id, worker: r.worker, warnings: r.warnings ?? [] };
  }

  /**
   * Creates a worker that `await using` deletes when the scope ends (an
   * exception included): `await using w = await client.scopedWorker({agentType: 'claude'})`.
   */
  async scopedWorker(spec: WorkerSpec | WireWorkerSpec, opts: CallOptions = {}): Promise<ScopedWorker> {
    const w = await this.createWorker(spec, opts);
    let deleted: Promise<void> | undefined;
    const del = () => (deleted ??= this.deleteWorker(w.workerId));
    return { ...w, delete: del, [Symbol.asyncDispose]: del };
  }

  /** Runs fn with a new worker and deletes the worker when fn ends, whether it resolves or rejects. */
  async withWorker<T>(spec: WorkerSpec | WireWorkerSpec, fn: (w: CreatedWorker) => Promise<T>, opts: CallOptions = {}): Promise<T> {
    const w = await this.createWorker(spec, opts);
    try {
      return await fn(w);
    } finally {
      await this.deleteWorker(w.workerId);
    }
  }

  /** Deletes (retires) a worker. */
  async deleteWorker(workerId: string, opts: CallOptions = {}): Promise<void> {
    await this.command({ action: 'delete', worker_id: workerId }, opts);
  }

  /** The manager's view of a worker (the status command); NOT_FOUND for a worker it does not know. */
  async workerStatus(workerId: string, opts: CallOptions = {}): Promise<ReplyWorker> {
    const r = await this.command({ action: 'status', worker_id: workerId }, opts);
    if (!r.worker) throw new AgentvisorError('INTERNAL_ERROR', 'status: a reply without the worker');
    return r.worker;
  }

  /** Every worker, as the managers see them (the list command). */
  async listWorkers(opts: CallOptions = {}): Promise<ReplyWorker[]> {
    return (await this.command({ action: 'list' }, opts)).workers ?? [];
  }

  /** Pauses an idle worker (a busy one: WORKER_BUSY); a task on its input wakes it. */
  async pauseWorker(workerId: string, opts: CallOptions = {}): Promise<ReplyWorker | undefined> {
    return (await this.command({ action: 'pause', worker_id: workerId }, opts)).worker;
  }

  async unpauseWorker(workerId: string, opts: CallOptions = {}): Promise<ReplyWorker | undefined> {
    return (await this.command({ action: 'unpause', worker_id: workerId }, opts)).worker;
  }

  /**
   * Hibernates an idle long-lived worker: its container goes, its id,
   * streams and session stay; the next task on its input wakes it.
   */
  async hibernateWorker(workerId: string, opts: CallOptions = {}): Promise<ReplyWorker | undefined> {
    return (await this.command({ action: 'hibernate', worker_id: workerId }, opts)).worker;
  }

  /** Forgets a project's agent session and stored context. */
  async resetContext(projectId: string, agentType: AgentTypeIn, opts: CallOptions = {}): Promise<void> {
    await this.command({ action: 'reset_context', project_id: projectId, agent_type: agentType }, opts);
  }

  /** Sets a project's budget in US dollars (limitUsd 0 removes it); tasks of a project that spent its limit fail BUDGET_EXCEEDED. */
  async setBudget(projectId: string, budget: { limitUsd: number; warnUsd?: number }, opts: CallOptions = {}): Promise<void> {
    const b: { limit_usd: number; warn_usd?: number } = { limit_usd: budget.limitUsd };
    if (budget.warnUsd !== undefined) b.warn_usd = budget.warnUsd;
    await this.command({ action: 'set_budget', project_id: projectId, budget: b }, opts);
  }

  // Tasks.

  /** Puts a task on a worker's input (NOT_FOUND for an unknown worker) and creates its run, requested. */
  sendTask(workerId: string, task: TaskInput): Promise<SentTask> {
    return sendTask(this.conn, workerId, task);
  }

  /** The task's output, whatever its status (complete, blocked, failed, cancelled); AwaitTimeoutError after timeoutMs (default 30 min). */
  awaitOutput(sent: SentTask, opts: AwaitOptions = {}): Promise<Output> {
    return awaitOutput(this.conn, sent, opts);
  }

  /** Sends the task and awaits its output. */
  async runTask(workerId: string, task: TaskInput, opts: AwaitOptions = {}): Promise<Output> {
    return this.awaitOutput(await this.sendTask(workerId, task), opts);
  }

  /** The task's progress events and permission requests, then its output; the iteration ends after the output. */
  events(sent: SentTask, opts: CallOptions = {}): AsyncGenerator<TaskEvent, void, undefined> {
    return taskEvents(this.conn, sent, opts);
  }

  /** The task's progress events; the iteration ends when its output comes. */
  async *progress(sent: SentTask, opts: CallOptions = {}): AsyncGenerator<Progress, void, undefined> {
    for await (const ev of taskEvents(this.conn, sent, opts)) if (ev.type === 'progress') yield ev.doc;
  }

  /** Ends the task, queued or running: its output says cancelled (CANCELLED), unless it ended before. */
  cancelTask(sent: SentTask, reason = ''): Promise<void> {
    return cancelTask(this.conn, sent, reason);
  }

  /** Steers a running task with a user message. */
  sendMessage(sent: SentTask, text: string): Promise<void> {
    return sendMessage(this.conn, sent, text);
  }

  /** Answers a blocked run's question: a task on the worker that continues the run's session (its output carries answers). */
  answerQuestion(workerId: string, blockedRequestId: string, answer: string, task: Omit<TaskInput, 'prompt' | 'answers'> = {}): Promise<SentTask> {
    checkId('answers', blockedRequestId, 'INVALID_TASK');
    return sendTask(this.conn, workerId, { ...task, prompt: answer, answers: blockedRequestId });
  }

  /** Allows the tool call a permission request asks about. */
  allowPermission(sent: SentTask, request: PermissionRequest | string): Promise<void> {
    return replyPermission(this.conn, sent, typeof request === 'string' ? request : request.permission_id, true);
  }

  /** Denies the tool call a permission request asks about; message tells the model why. */
  denyPermission(sent: SentTask, request: PermissionRequest | string, message = ''): Promise<void> {
    return replyPermission(this.conn, sent, typeof request === 'string' ? request : request.permission_id, false, message);
  }

  // State.

  /** A worker's status hash and heartbeat, read from Redis; NOT_FOUND when it has none. */
  getWorker(workerId: string): Promise<WorkerStatus> {
    return getWorker(this.conn, workerId);
  }

  /** The ids of the live workers, sorted. */
  workerIds(): Promise<string[]> {
    return listWorkerIds(this.conn);
  }

  /** A task's run hash; NOT_FOUND when there is none. */
  getRun(requestId: string): Promise<RunRecord> {
    return getRun(this.conn, requestId);
  }

  /** A project's budget and spending. */
  getBudget(projectId: string): Promise<ProjectBudget> {
    return getBudget(this.conn, projectId);
  }

  /** A project's usage counters. */
  getUsage(projectId: string): Promise<ProjectUsage> {
    return getUsage(this.conn, projectId);
  }

  /** Follows the lifecycle stream and the workers' output streams. */
  watch(opts: WatchOptions = {}): AsyncGenerator<StreamEvent, void, undefined> {
    return watchStreams(this.conn, opts);
  }
}
