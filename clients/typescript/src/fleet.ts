// The runtime's state as the managers and workers keep it in Redis
// (PROTOCOL.md, "Worker status hash", "Run hash", "Sessions and usage",
// "Budgets"): read-only snapshots.
import { AgentvisorError, redisError } from './errors.js';
import type { Conn } from './conn.js';
import type { Heartbeat } from './types.js';

/** A worker's status hash (all values strings, PROTOCOL.md's field names) and its last heartbeat, if any. */
export interface WorkerStatus {
  workerId: string;
  /** The worker state: starting, idle, busy, paused, stopping, stopped, failed. */
  state: string;
  hash: Record<string, string>;
  heartbeat?: Heartbeat;
}

/** A run hash: the status of one task, for polling. */
export interface RunRecord {
  requestId: string;
  taskId: string;
  workerId: string;
  projectId: string;
  /** requested, queued, running, completed or failed (the run state machine). */
  status: string;
  currentStep: string;
  stepsTotal: number;
  stepsCompleted: number;
  /** CODE: message of a failed run. */
  error: string;
  createdAt: string;
  startedAt: string;
  finishedAt: string;
  updatedAt: string;
  sessionId: string;
  attempt: number;
  attempts: number;
}

/** A project's budget (limit 0: none) and what it has spent, in US dollars. */
export interface ProjectBudget {
  projectId: string;
  limitUsd: number;
  warnUsd: number;
  spentUsd: number;
}

/** What a project's tasks used. */
export interface ProjectUsage {
  projectId: string;
  tasks: number;
  input: number;
  output: number;
  cacheRead: number;
  cacheCreation: number;
  costUsd: number;
}

const num = (v: string | null | undefined): number => {
  const n = Number(v);
  return v && Number.isFinite(n) ? n : 0;
};

/** Reads one worker's status hash and heartbeat; NOT_FOUND when it has no status hash. */
export async function getWorker(c: Conn, workerId: string): Promise<WorkerStatus> {
  let hash: Record<string, string>;
  let beat: string | null;
  try {
    [hash, beat] = await Promise.all([c.redis.hgetall(c.keys.status(workerId)), c.redis.get(c.keys.heartbeat(workerId))]);
  } catch (e) {
    throw redisError(e, `status of ${workerId}`);
  }
  if (Object.keys(hash).length === 0) throw new AgentvisorError('NOT_FOUND', `no worker ${JSON.stringify(workerId)}`);
  const ws: WorkerStatus = { workerId, state: hash.status ?? '', hash };
  if (beat) {
    try {
      const hb = JSON.parse(beat);
      if (hb && hb.v === 1 && hb.type === 'heartbeat') ws.heartbeat = hb as Heartbeat;
    } catch {
      // a heartbeat that does not decode is as none
    }
  }
  return ws;
}

/**
 * The ids of every worker, sorted: the workers set's and the hibernated
 * ones of every host (no container; a task wakes them).
 */
export async function listWorkerIds(c: Conn): Promise<string[]> {
  try {
    const ids = new Set(await c.redis.smembers(c.keys.workers()));
    for (const host of await c.redis.smembers(c.keys.hibernatedHosts())) {
      for (const id of await c.redis.smembers(c.keys.hibernated(host))) ids.add(id);
    }
    return [...ids].sort();
  } catch (e) {
    throw redisError(e, 'workers');
  }
}

/** Reads a run hash; NOT_FOUND when there is none (unknown, or expired RUN_RETENTION after it ended). */
export async function getRun(c: Conn, requestId: string): Promise<RunRecord> {
  let h: Record<string, string>;
  try {
    h = await c.redis.hgetall(c.keys.run(requestId));
  } catch (e) {
    throw redisError(e, `run ${requestId}`);
  }
  if (Object.keys(h).length === 0) throw new AgentvisorError('NOT_FOUND', `no run ${JSON.stringify(requestId)}`);
  const s = (f: string) => h[f] ?? '';
  return {
    requestId: s('request_id') || requestId, taskId: s('task_id'), workerId: s('worker_id'), projectId: s('project_id'),
    status: s('status'), currentStep: s('current_step'), stepsTotal: num(h.steps_total), stepsCompleted: num(h.steps_completed),
    error: s('error'), createdAt: s('created_at'), startedAt: s('started_at'), finishedAt: s('finished_at'), updatedAt: s('updated_at'),
    sessionId: s('session_id'), attempt: num(h.attempt), attempts: num(h.attempts),
  };
}

/** Reads a project's budget (zero limit: none) and its spending. */
export async function getBudget(c: Conn, projectId: string): Promise<ProjectBudget> {
  try {
    const [b, spent] = await Promise.all([
      c.redis.hmget(c.keys.projectBudget(projectId), 'limit_usd', 'warn_usd'),
      c.redis.hget(c.keys.usageProject(projectId), 'cost_usd'),
    ]);
    return { projectId, limitUsd: num(b[0]), warnUsd: num(b[1]), spentUsd: num(spent) };
  } catch (e) {
    throw redisError(e, `budget of ${projectId}`);
  }
}

/** Reads a project's usage counters (zeros when it has none). */
export async function getUsage(c: Conn, projectId: string): Promise<ProjectUsage> {
  let h: Record<string, string>;
  try {
    h = await c.redis.hgetall(c.keys.usageProject(projectId));
  } catch (e) {
    throw redisError(e, `usage of ${projectId}`);
  }
  return {
    projectId, tasks: num(h.tasks), input: num(h.input), output: num(h.output),
    cacheRead: num(h.cache_read), cacheCreation: num(h.cache_creation), costUsd: num(h.cost_usd),
  };
}
