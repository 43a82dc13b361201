package spawner

import dockerengine "github.com/agentvisor/agentvisor/spawner/engine/docker"

// dockerEngine is the Spawner's engine, for the tests of what a Docker
// engine keeps (spare network namespaces).
func (s *Spawner) dockerEngine() *dockerengine.Engine { return s.engine.(*dockerengine.Engine) }
