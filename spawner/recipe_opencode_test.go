package spawner

import (
	"strings"
	"testing"

	"github.com/agentvisor/agentvisor/protocol"
)

// OpenCode's image fetches its unscoped platform package from npm, checks
// its pinned sha512, and installs the binary as /usr/local/bin/opencode;
// an acp worker has no recipe of ours (its image brings its agent).
func TestOpenCodeDockerfile(t *testing.T) {
	df, err := Dockerfile(protocol.Recipe{Agent: protocol.AgentOpenCode}, "base@sha256:0")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{NPMRegistry + "/opencode-linux-x64/-/opencode-linux-x64-1.18.33.tgz", "abfb7fde9d824f13",
		"/opt/agent/package/bin/opencode /usr/local/bin/opencode"} {
		if !strings.Contains(df, want) {
			t.Errorf("the Dockerfile lacks %q:\n%s", want, df)
		}
	}
	if _, err := Dockerfile(protocol.Recipe{Agent: protocol.AgentACP}, "base@sha256:0"); err == nil {
		t.Error("a recipe for acp")
	}
}
