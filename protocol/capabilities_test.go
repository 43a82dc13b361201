package protocol

import (
	"slices"
	"testing"
)

const testBase = "sha256:0123456789abcdef"

func TestRecipeCanonicalTextAndHashAreFixed(t *testing.T) {
	// The golden hashes were computed outside Go, with
	//   printf 'agentvisor-image-recipe\nversion=1\nagent=claude\nbase=sha256:0123456789abcdef\ncapabilities=CURL,GIT\n' | sha256sum
	// so a change of the documented form breaks this test.
	tests := []struct {
		name      string
		recipe    Recipe
		canonical string
		hash      string
	}{
		{
			name:      "claude with two capabilities",
			recipe:    Recipe{Agent: AgentClaude, Capabilities: []Capability{"GIT", "CURL"}, BaseImage: testBase, Version: 1},
			canonical: "agentvisor-image-recipe\nversion=1\nagent=claude\nbase=sha256:0123456789abcdef\ncapabilities=CURL,GIT\n",
			hash:      "33bbee26d5ffde18",
		},
		{
			name:      "droid without capabilities",
			recipe:    Recipe{Agent: AgentDroid, BaseImage: testBase, Version: 1},
			canonical: "agentvisor-image-recipe\nversion=1\nagent=droid\nbase=sha256:0123456789abcdef\ncapabilities=\n",
			hash:      "85c8b4a0cf1f6600",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := tt.recipe.Canonical()
			if err != nil || c != tt.canonical {
				t.Fatalf("Canonical = %q, %v\nwant %q", c, err, tt.canonical)
			}
			h, err := tt.recipe.Hash()
			if err != nil || h != tt.hash {
				t.Fatalf("Hash = %q, %v; want %q", h, err, tt.hash)
			}
			tag, _ := tt.recipe.Tag()
			if tag != "worker:"+tt.hash {
				t.Fatalf("Tag = %q", tag)
			}
		})
	}
}

func TestRecipeHashIgnoresOrderDuplicatesAndCase(t *testing.T) {
	want, _ := Recipe{Agent: AgentClaude, Capabilities: []Capability{CapCurl, CapGit, CapGitHubCLI}, BaseImage: testBase}.Hash()
	for _, caps := range [][]Capability{
		{CapGitHubCLI, CapGit, CapCurl},
		{CapGit, CapCurl, CapGit, CapGitHubCLI, CapCurl},
		{"git", "Curl", "github_cli"},
	} {
		got, err := Recipe{Agent: AgentClaude, Capabilities: caps, BaseImage: testBase}.Hash()
		if err != nil || got != want {
			t.Errorf("caps %v: hash %q, %v; want %q", caps, got, err, want)
		}
	}
}

func TestRecipeHashChangesWithEveryInput(t *testing.T) {
	base := Recipe{Agent: AgentClaude, Capabilities: []Capability{CapGit}, BaseImage: testBase}
	h0, _ := base.Hash()
	variants := map[string]Recipe{
		"agent":        {Agent: AgentDroid, Capabilities: []Capability{CapGit}, BaseImage: testBase},
		"capabilities": {Agent: AgentClaude, Capabilities: []Capability{CapGit, CapCurl}, BaseImage: testBase},
		"no caps":      {Agent: AgentClaude, BaseImage: testBase},
		"base image":   {Agent: AgentClaude, Capabilities: []Capability{CapGit}, BaseImage: "sha256:ffff"},
		"version":      {Agent: AgentClaude, Capabilities: []Capability{CapGit}, BaseImage: testBase, Version: RecipeVersion + 1},
	}
	for name, r := range variants {
		h, err := r.Hash()
		if err != nil || h == h0 {
			t.Errorf("changing the %s kept hash %q (err %v)", name, h, err)
		}
	}
}

func TestRecipeErrors(t *testing.T) {
	for name, r := range map[string]Recipe{
		"unknown agent":      {Agent: "gpt", BaseImage: testBase},
		"no base":            {Agent: AgentClaude},
		"base with newline":  {Agent: AgentClaude, BaseImage: "a\nagent=droid"},
		"unknown capability": {Agent: AgentClaude, BaseImage: testBase, Capabilities: []Capability{"FTP"}},
	} {
		if _, err := r.Hash(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestNormalizeCapabilities(t *testing.T) {
	got, err := NormalizeCapabilities([]Capability{"docker", "GIT", "Docker"})
	if err != nil || !slices.Equal(got, []Capability{CapDocker, CapGit}) {
		t.Fatalf("got %v, %v", got, err)
	}
	if got, _ := NormalizeCapabilities(nil); got == nil || len(got) != 0 {
		t.Fatalf("nil input gave %#v", got)
	}
}

func TestParseAgentTypeAndKind(t *testing.T) {
	for in, want := range map[string]AgentType{"claude": AgentClaude, "CLAUDE": AgentClaude, "FACTORY": AgentDroid, " droid ": AgentDroid} {
		if got, err := ParseAgentType(in); err != nil || got != want {
			t.Errorf("ParseAgentType(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseAgentType("cursor"); err == nil {
		t.Error("unknown agent type accepted")
	}
	for in, want := range map[string]Kind{"long_lived": KindLongLived, "PO": KindLongLived, "developer": KindDeveloper} {
		if got, err := ParseKind(in); err != nil || got != want {
			t.Errorf("ParseKind(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseKind("batch"); err == nil {
		t.Error("unknown kind accepted")
	}
}

func TestCodesRetryable(t *testing.T) {
	want := map[Code]bool{
		CodeAgentTimeout: true, CodeAgentCrashed: true, CodeAgentError: true, CodeNoStopOutput: false, CodeInvalidStopOutput: false, CodeOutputTooLarge: false, CodeTaskFailed: false,
		CodeOOMKilled: true, CodeKilled: true, CodeTerminated: true, CodeResumeFailed: true,
		CodeInvalidTask: false, CodeInvalidCommand: false, CodeNotFound: false, CodeForbidden: false,
		CodeUpstreamUnavailable: true, CodeResourceExhausted: true, CodeInternalError: false,
		CodeWorkerBusy: true, CodeConflict: true, CodeShuttingDown: true, CodeReplaceLimit: false,
		CodeMCPUnavailable: true,
		CodeCancelled:      false, CodeAuthFailed: false, CodeRateLimited: true, CodeAgentStalled: true, CodeBudgetExceeded: false,
		CodeHostLost: true, CodeNoHost: true, CodeWorkerGone: false,
		CodeCommandExpired: true, CodeNoManager: true, CodeRedisAuth: false,
		CodeGitWorktree: true, CodeGitPush: true,
		CodeImageNotAllowed: false, CodeImageBuildFailed: false, CodeRuntimeUnavailable: false,
	}
	if len(Codes) != len(want) {
		t.Fatalf("%d codes, the test knows %d", len(Codes), len(want))
	}
	for _, c := range Codes {
		if c.Retryable() != want[c] {
			t.Errorf("%s retryable = %v, want %v", c, c.Retryable(), want[c])
		}
		e := NewError(c, "x %d", 1)
		if e.Retryable != want[c] || e.Message != "x 1" || e.Error() != string(c)+": x 1" {
			t.Errorf("NewError(%s) = %+v", c, e)
		}
	}
	if Code("NOPE").Valid() || Code("NOPE").Retryable() {
		t.Error("unknown code valid or retryable")
	}
}

// A create asking for DOCKER is told what it gets: the CLI, no engine.
func TestSpecWarnings(t *testing.T) {
	if w := SpecWarnings(WorkerSpec{AgentType: AgentClaude, Capabilities: []Capability{CapGit, "docker"}}); len(w) != 1 || w[0] != DockerWarning {
		t.Fatalf("DOCKER: %q", w)
	}
	if w := SpecWarnings(WorkerSpec{AgentType: AgentClaude, Capabilities: []Capability{CapGit}}); len(w) != 0 {
		t.Fatalf("GIT: %q", w)
	}
}
