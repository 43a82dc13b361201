package protocol

// Docker labels that mark what the spawner owns. Ownership lives in these
// labels (and in Redis), never only in a process's memory, so that a
// restarted manager knows its containers and images.
const (
	LabelPrefix = "io.agentvisor."

	LabelManaged      = LabelPrefix + "managed" // "true" on every container and image the spawner made
	LabelWorkerID     = LabelPrefix + "worker_id"
	LabelAgentType    = LabelPrefix + "agent_type"
	LabelKind         = LabelPrefix + "kind"
	LabelProjectID    = LabelPrefix + "project_id"
	LabelCreatedAt    = LabelPrefix + "created_at" // RFC 3339, UTC
	LabelKeyPrefix    = LabelPrefix + "key_prefix" // the Redis key prefix the worker uses
	LabelRecipe       = LabelPrefix + "recipe"     // canonical recipe text (images)
	LabelRecipeHash   = LabelPrefix + "recipe_hash"
	LabelCapabilities = LabelPrefix + "capabilities" // comma-separated, sorted
)
