import { AgentvisorError } from './errors.js';
import type { Kind, Task } from './types.js';

/** A task's priority on the developer queue (none is normal). */
export type Priority = NonNullable<Task['priority']>;

/** The priorities, highest first. */
export const priorities: readonly Priority[] = ['high', 'normal', 'low'];

/** The first segment of every stream and key name, unless WORKER_KEY_PREFIX sets another. */
export const defaultPrefix = 'worker';

/**
 * Keys builds the Redis stream and key names of PROTOCOL.md ("Streams and
 * keys") under a prefix ("worker" by default; WORKER_KEY_PREFIX in every
 * component of a deployment that sets another).
 */
export class Keys {
  readonly prefix: string;

  constructor(prefix = defaultPrefix) {
    if (prefix === '') prefix = defaultPrefix;
    if (/[\s{}]/.test(prefix) || prefix.startsWith(':') || prefix.endsWith(':')) {
      throw new AgentvisorError('INVALID_COMMAND', `key prefix ${JSON.stringify(prefix)}: must not contain whitespace or braces, nor start or end with ':'`);
    }
    this.prefix = prefix;
  }

  private join(...parts: string[]): string {
    return [this.prefix, ...parts].join(':');
  }

  commands(): string { return this.join('commands'); }
  lifecycle(): string { return this.join('lifecycle'); }
  replies(client: string): string { return this.join('replies', client); }
  /** The ids of the managers that wrote a state hash (a set). */
  managers(): string { return this.join('managers'); }
  /** A running manager's state hash, which expires 30 s after its last refresh. */
  managerState(managerId: string): string { return this.join('manager', managerId); }
  status(workerId: string): string { return this.join('status', workerId); }
  heartbeat(workerId: string): string { return this.join('heartbeat', workerId); }
  input(workerId: string): string { return this.join(workerId, 'input'); }
  output(workerId: string): string { return this.join(workerId, 'output'); }
  /** The developer queue of a priority: the normal one is developer:input, high and low have a stream each. */
  developerInput(priority?: Priority): string {
    if (priority === undefined || priority === 'normal') return this.join('developer', 'input');
    if (!priorities.includes(priority)) throw new AgentvisorError('INVALID_TASK', `priority ${JSON.stringify(priority)}: want high, normal or low`);
    return this.join('developer', 'input', priority);
  }
  /** The developer queues, highest priority first. */
  developerInputs(): string[] { return priorities.map((p) => this.developerInput(p)); }
  developerOutput(): string { return this.join('developer', 'output'); }
  run(requestId: string): string { return this.join('run', requestId); }
  workers(): string { return this.join('workers'); }
  /** The hosts that have had a hibernated worker (a set). */
  hibernatedHosts(): string { return this.join('hibernated', 'hosts'); }
  /** The hibernated workers of one host (no container; a task wakes them). */
  hibernated(host: string): string { return this.join('hibernated', 'host', host); }
  usageProject(projectId: string): string { return this.join('usage', 'project', projectId); }
  projectBudget(projectId: string): string { return this.join('budget', 'project', projectId); }

  /**
   * The input stream a worker of kind reads: its own, or the developer
   * queue of the task's priority (a long-lived worker has one input).
   */
  inputFor(kind: Kind, workerId: string, priority?: Priority): string {
    return kind === 'developer' ? this.developerInput(priority) : this.input(workerId);
  }

  /** The output stream a worker of kind writes: its own, or the developer queue's. */
  outputFor(kind: Kind, workerId: string): string {
    return kind === 'developer' ? this.developerOutput() : this.output(workerId);
  }
}
