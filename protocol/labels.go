package protocol

// Docker labels that mark what the spawner owns, those that tools outside
// the manager (test harnesses, an operator's docker filters) select by.
// Ownership lives in labels and in Redis, never only in a process's
// memory, so that a restarted manager knows its containers and images;
// the labels only a manager reads are the spawner's own.
const (
	LabelPrefix = "io.agentvisor."

	LabelManaged   = LabelPrefix + "managed" // "true" on every container and image the spawner made
	LabelWorkerID  = LabelPrefix + "worker_id"
	LabelCreatedAt = LabelPrefix + "created_at" // RFC 3339, UTC
	LabelKeyPrefix = LabelPrefix + "key_prefix" // the Redis key prefix the worker uses
)
