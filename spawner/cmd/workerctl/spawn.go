package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentvisor/agentvisor/protocol"
)

func spawnCmd(c *ctl) *cobra.Command {
	var agent, kind, project, instructions, memory, base, dockerfile, devcontainer, runtime string
	var cpus float64
	var timeout time.Duration
	var caps, allow, env, buildArgs []string
	cmd := &cobra.Command{
		Use:     "spawn --agent " + agentChoices() + " [flags]",
		Short:   "Ask a worker-manager for a worker; prints its id",
		Example: `  workerctl spawn --agent claude --project shop --cap GIT --allow 'git.*'`,
		Args:    args(0, "no argument"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			spec := protocol.WorkerSpec{AgentType: protocol.AgentType(agent), Kind: protocol.Kind(kind), ProjectID: project,
				AllowedCommands: allow, Limits: protocol.Limits{Memory: memory, CPUs: cpus}, Runtime: protocol.Runtime(runtime)}
			for _, cp := range caps {
				spec.Capabilities = append(spec.Capabilities, protocol.Capability(strings.ToUpper(cp)))
			}
			spec.Instructions = instructions
			if strings.HasPrefix(instructions, "@") {
				b, err := os.ReadFile(instructions[1:])
				if err != nil {
					return fail(exitUsage, "spawn: --instructions: %v", err)
				}
				spec.Instructions = string(b)
			}
			for _, kv := range env {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					return fail(exitUsage, "spawn: --env %q: want NAME=VALUE", kv)
				}
				if spec.Env == nil {
					spec.Env = map[string]string{}
				}
				spec.Env[k] = v
			}
			img, err := projectImage(base, dockerfile, devcontainer, buildArgs)
			if err != nil {
				return err
			}
			spec.Image = img
			if err := spec.Validate(); err != nil {
				return fail(exitUsage, "spawn: %v", err)
			}
			r, err := c.do(cmd.Context(), protocol.Command{Action: protocol.ActionCreate, Spec: &spec}, timeout)
			if err != nil {
				return err
			}
			if c.json {
				return printJSON(c.out, r.Worker)
			}
			fmt.Fprintln(c.out, r.Worker.WorkerID)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&agent, "agent", "", "the agent: claude, droid, codex, opencode, qwen or acp (required)")
	f.StringVar(&kind, "kind", "", "long_lived (reads its own input; the default) or developer (the shared developer queue)")
	f.StringVar(&project, "project", "", "the project the worker's sessions and volume belong to")
	f.StringArrayVar(&caps, "cap", nil, "a capability of the image: GIT, GITHUB_CLI, CURL, DOCKER (repeatable)")
	f.StringArrayVar(&allow, "allow", nil, "a pattern of shell commands the agent may run, e.g. 'git.*' (repeatable)")
	f.StringVar(&instructions, "instructions", "", "the agent's instructions (CLAUDE.md / AGENTS.md), or @FILE to read them from a file")
	f.StringVar(&memory, "memory", "", "memory limit such as 512m (default: the manager's WORKER_MEMORY_LIMIT)")
	f.Float64Var(&cpus, "cpus", 0, "CPU limit in cores such as 0.5 (default: the manager's WORKER_CPU_LIMIT)")
	f.StringVar(&runtime, "runtime", "", "the worker's sandbox: runc, or gvisor for a sealed worker (default: the manager's WORKER_RUNTIME)")
	f.StringArrayVar(&env, "env", nil, "NAME=VALUE set in the worker's environment (repeatable)")
	f.StringVar(&base, "image", "", "the project's own base image, one the manager's PROJECT_IMAGE_BASES allows")
	f.StringVar(&dockerfile, "dockerfile", "", "the project's Dockerfile (a path) the worker's image is built from (with --devcontainer: its build.dockerfile)")
	f.StringVar(&devcontainer, "devcontainer", "", "the project's devcontainer.json (a path) the worker's image is built from")
	f.StringArrayVar(&buildArgs, "build-arg", nil, "NAME=VALUE, a --dockerfile's build argument (repeatable)")
	f.DurationVar(&timeout, "timeout", 6*time.Minute, "how long to wait for the manager's reply (a create may queue for a slot)")
	_ = cmd.RegisterFlagCompletionFunc("agent", fixed(string(protocol.AgentClaude), string(protocol.AgentDroid), string(protocol.AgentCodex), string(protocol.AgentOpenCode), string(protocol.AgentQwen), string(protocol.AgentACP)))
	_ = cmd.RegisterFlagCompletionFunc("runtime", fixed(string(protocol.RuntimeRunc), string(protocol.RuntimeGVisor)))
	_ = cmd.RegisterFlagCompletionFunc("kind", fixed(string(protocol.KindLongLived), string(protocol.KindDeveloper)))
	capNames := make([]string, len(protocol.Capabilities))
	for i, cp := range protocol.Capabilities {
		capNames[i] = string(cp)
	}
	_ = cmd.RegisterFlagCompletionFunc("cap", fixed(capNames...))
	return cmd
}

// projectImage is the spec's project image of spawn's flags: the files
// are read here and travel in the spec (nil when no flag is given).
func projectImage(base, dockerfile, devcontainer string, buildArgs []string) (*protocol.ProjectImage, error) {
	if base == "" && dockerfile == "" && devcontainer == "" && len(buildArgs) == 0 {
		return nil, nil
	}
	img := &protocol.ProjectImage{Base: base}
	for _, file := range []struct {
		flag, path string
		dst        *string
	}{{"--dockerfile", dockerfile, &img.Dockerfile}, {"--devcontainer", devcontainer, &img.Devcontainer}} {
		if file.path == "" {
			continue
		}
		b, err := os.ReadFile(file.path)
		if err != nil {
			return nil, fail(exitUsage, "spawn: %s: %v", file.flag, err)
		}
		*file.dst = string(b)
	}
	for _, kv := range buildArgs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fail(exitUsage, "spawn: --build-arg %q: want NAME=VALUE", kv)
		}
		if img.BuildArgs == nil {
			img.BuildArgs = map[string]string{}
		}
		img.BuildArgs[k] = v
	}
	return img, nil
}

// agentChoices is every agent type, as the usage line offers them.
func agentChoices() string {
	names := make([]string, len(protocol.AgentTypes))
	for i, a := range protocol.AgentTypes {
		names[i] = string(a)
	}
	return strings.Join(names, "|")
}
