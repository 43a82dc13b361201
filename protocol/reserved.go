package protocol

import "strings"

// Variables a worker spec's env may not set: those the manager or the
// wrapper own (a spec that could set WORKER_ID would steal another
// worker's tasks; ALLOWED_COMMANDS, AGENT_BIN or HEARTBEAT_INTERVAL would
// undo what the manager decided; MODEL_PRICES would price the spec's own
// budget), the credentials passed from the host,
// and those that change how programs load or find each other.
var (
	reservedEnvPrefixes = []string{"WORKER_", "AGENT_", "REDIS", "SESSION_", "ANTHROPIC_", "FACTORY_", "OPENAI_", "CODEX_", "DROID_", "API_", "LD_"}
	reservedEnvNames    = map[string]bool{
		"ALLOWED_COMMANDS": true, "HEARTBEAT_INTERVAL": true, "SHUTDOWN_GRACE": true, "PROGRESS_ADDR": true,
		"INSTRUCTIONS": true, "USER_ID": true, "TASK_TIMEOUT": true, "STALL_TIMEOUT": true, "APPROVAL_TIMEOUT": true, "RESULT_GRACE": true, "KILL_GRACE": true,
		"EVENT_BUFFER": true, "PAUSE_AFTER_OUTPUT": true, "WORKSPACE": true,
		EnvStreamMaxLen: true, EnvRunRetention: true, EnvModelPrices: true, "PATH": true, "HOME": true, "USER": true, "SHELL": true,
	}
)

// ReservedEnv reports whether a worker spec's env may not set name.
func ReservedEnv(name string) bool {
	if reservedEnvNames[strings.ToUpper(name)] {
		return true
	}
	for _, p := range reservedEnvPrefixes {
		if strings.HasPrefix(strings.ToUpper(name), p) {
			return true
		}
	}
	return false
}
