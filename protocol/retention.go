package protocol

import "time"

// Retention: what the runtime keeps in Redis, and for how long. Every
// component reads the same variables, with these defaults, so that one
// setting (given to the manager, and passed by it to every worker) bounds
// the whole deployment. PROTOCOL.md, "Retention", says what each bounds.
const (
	// EnvStreamMaxLen names the variable that sets the approximate
	// MAXLEN of every XADD (XADD key MAXLEN ~ n): output, lifecycle and
	// control streams. A consumer that falls further behind than this
	// loses the oldest entries.
	EnvStreamMaxLen = "STREAM_MAXLEN"
	// DefaultStreamMaxLen is STREAM_MAXLEN's default.
	DefaultStreamMaxLen int64 = 10_000

	// EnvRunRetention names the variable that sets how long a run hash
	// lives after its terminal state (an EXPIRE set with the output).
	EnvRunRetention = "RUN_RETENTION"
	// DefaultRunRetention is RUN_RETENTION's default.
	DefaultRunRetention = 24 * time.Hour
)

// Fields of the run hash (Keys.Run) besides those of Run.Hash.
const (
	// RunFieldAttempts counts the times the spawner handed the task to
	// another worker (its requeue script increments it with HINCRBY). The
	// wrapper reads it: a task's attempt is this count plus the delivery
	// count of the stream entry it read.
	RunFieldAttempts = "attempts"
	// RunFieldAttempt is the attempt the run hash describes (1 = the
	// first delivery), written by the wrapper.
	RunFieldAttempt = "attempt"
)
