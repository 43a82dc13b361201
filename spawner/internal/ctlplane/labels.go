package ctlplane

import "github.com/agentvisor/agentvisor/protocol"

// Labels a manager puts on the containers, images and volumes it makes
// beyond protocol's (managed, worker id, created at, key prefix: those that
// tools outside the manager select by). Only a manager reads these.
const (
	LabelAgentType    = protocol.LabelPrefix + "agent_type"    // containers, volumes
	LabelKind         = protocol.LabelPrefix + "kind"          // containers
	LabelProjectID    = protocol.LabelPrefix + "project_id"    // containers, volumes
	LabelRecipe       = protocol.LabelPrefix + "recipe"        // images: the canonical recipe text
	LabelRecipeHash   = protocol.LabelPrefix + "recipe_hash"   // images
	LabelCapabilities = protocol.LabelPrefix + "capabilities"  // images: comma-separated, sorted
	LabelProjectPhase = protocol.LabelPrefix + "project_phase" // images built from a project's own image: project or layer
	// LabelCommandID marks the container a create command made, so that
	// the same command delivered again finds it.
	LabelCommandID = protocol.LabelPrefix + "command_id"
	// LabelImage is the worker image tag the container was made from.
	LabelImage = protocol.LabelPrefix + "image"
	// LabelHost is the fleet host whose manager made the container.
	LabelHost = protocol.LabelPrefix + "host"
)
