import type { Code, ErrorInfo } from './types.js';

// Whether retrying the same request may succeed, per code (PROTOCOL.md,
// "Error codes"). A Record over the generated Code type: a code added to
// the schema does not compile until it is given here.
const retryableByCode: Record<Code, boolean> = {
  AGENT_TIMEOUT: true,
  AGENT_CRASHED: true,
  AGENT_ERROR: true,
  NO_STOP_OUTPUT: false,
  INVALID_STOP_OUTPUT: false,
  OUTPUT_TOO_LARGE: false,
  TASK_FAILED: false,
  OOM_KILLED: true,
  KILLED: true,
  TERMINATED: true,
  RESUME_FAILED: true,
  INVALID_TASK: false,
  INVALID_COMMAND: false,
  NOT_FOUND: false,
  FORBIDDEN: false,
  UPSTREAM_UNAVAILABLE: true,
  RESOURCE_EXHAUSTED: true,
  INTERNAL_ERROR: false,
  WORKER_BUSY: true,
  CONFLICT: true,
  SHUTTING_DOWN: true,
  REPLACE_LIMIT: false,
  CANCELLED: false,
  AUTH_FAILED: false,
  RATE_LIMITED: true,
  AGENT_STALLED: true,
  BUDGET_EXCEEDED: false,
  MCP_UNAVAILABLE: true,
  HOST_LOST: true,
  NO_HOST: true,
  WORKER_GONE: false,
  COMMAND_EXPIRED: true,
  NO_MANAGER: true,
  REDIS_AUTH_FAILED: false,
  GIT_WORKTREE_FAILED: true,
  GIT_PUSH_FAILED: true,
  IMAGE_NOT_ALLOWED: false,
  IMAGE_BUILD_FAILED: false,
  RUNTIME_UNAVAILABLE: false,
};

/** Reports whether the same request may succeed if sent again; unknown codes are not retryable. */
export function isRetryable(code: string): boolean {
  return (retryableByCode as Record<string, boolean>)[code] === true;
}

/**
 * A failure with one of the protocol's stable codes: a reply that was not
 * ok carries the manager's code, a call that could not reach Redis (or
 * timed out waiting) UPSTREAM_UNAVAILABLE (REDIS_AUTH_FAILED when Redis
 * refused the credentials), no manager alive NO_MANAGER, a command with
 * no reply by its deadline COMMAND_EXPIRED, a document that does not
 * validate INVALID_TASK or INVALID_COMMAND, a worker or run that does not
 * exist NOT_FOUND. The message may change; the code does not.
 */
export class AgentvisorError extends Error {
  readonly code: Code;
  readonly retryable: boolean;

  constructor(code: Code, message: string, options?: { cause?: unknown; retryable?: boolean }) {
    super(`${code}: ${message}`, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'AgentvisorError';
    this.code = code;
    this.retryable = options?.retryable ?? isRetryable(code);
  }

  /** The error object of a reply or an output, as an AgentvisorError. */
  static from(info: ErrorInfo): AgentvisorError {
    return new AgentvisorError(info.code, info.message, { retryable: info.retryable });
  }
}

/** Reports whether err is an AgentvisorError with code. */
export function hasCode(err: unknown, code: Code): boolean {
  return err instanceof AgentvisorError && err.code === code;
}

/**
 * A failed Redis call, by cause: credentials refused (WRONGPASS, NOAUTH)
 * REDIS_AUTH_FAILED, not retryable; a command the user may not run
 * (NOPERM) FORBIDDEN; anything else UPSTREAM_UNAVAILABLE, its message
 * saying whether the connection was refused or timed out.
 */
export function redisError(err: unknown, what: string): AgentvisorError {
  if (err instanceof AgentvisorError) return err;
  const msg = err instanceof Error ? err.message : String(err);
  // Redis names an error by its reply's first word.
  if (/^(WRONGPASS|NOAUTH)\b/.test(msg)) {
    return new AgentvisorError('REDIS_AUTH_FAILED', `${what}: Redis refused the user or password: ${msg}`, { cause: err });
  }
  if (/^NOPERM\b/.test(msg)) return new AgentvisorError('FORBIDDEN', `${what}: the Redis user may not: ${msg}`, { cause: err });
  const code = (err as { code?: string } | null)?.code;
  let cause = '';
  if (code === 'ECONNREFUSED') cause = ' (connection refused: is Redis running at that address?)';
  else if (code === 'ETIMEDOUT' || /timed? ?out/i.test(msg)) cause = ' (timed out)';
  return new AgentvisorError('UPSTREAM_UNAVAILABLE', `${what}: ${msg}${cause}`, { cause: err });
}
