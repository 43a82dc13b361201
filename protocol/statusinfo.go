package protocol

import (
	"encoding/json"
	"strconv"
)

// WorkerInfoFromStatus reads a worker's status hash (Keys.Status) as
// its writers left it: what a reader without the engine (a client, the
// dashboard, workerctl) knows of the worker.
func WorkerInfoFromStatus(id string, h map[string]string) WorkerInfo {
	info := WorkerInfo{WorkerID: id, Status: ContainerStatus(h[StatusFieldContainer]),
		State: WorkerState(h[StatusFieldState]), Health: Health(h[StatusFieldHealth]),
		AgentType: AgentType(h[StatusFieldAgentType]), Kind: Kind(h[StatusFieldKind]),
		ProjectID: h[StatusFieldProjectID], ContainerID: h[StatusFieldContainerID], Image: h[StatusFieldImage],
		RequestID: h[StatusFieldRequestID], TaskID: h[StatusFieldTaskID], Error: h[StatusFieldError],
		Host: h[StatusFieldHost]}
	if v := h[StatusFieldExitCode]; v != "" {
		if n, err := strconv.Atoi(v); err == nil {
			info.ExitCode = &n
		}
	}
	var spec WorkerSpec
	if json.Unmarshal([]byte(h[StatusFieldSpec]), &spec) == nil && spec.Network != nil {
		info.Network = spec.Network
	}
	info.Incarnation, _ = strconv.Atoi(h[StatusFieldIncarnation])
	info.StartedAt, _ = ParseTime(h[StatusFieldStartedAt])
	info.UpdatedAt, _ = ParseTime(h[StatusFieldUpdatedAt])
	if !info.State.Valid() {
		info.State = ""
	}
	if !info.Health.Valid() {
		info.Health = ""
	}
	return info
}
