package main

import "github.com/agentvisor/agentvisor/stubmodel"

// What the demo asks of its workers: the projects, the instructions and
// prompts, the commands each agent may run, the manager's settings for
// them, and what the stub model answers to each task.

// The projects of the demo: sessions and usage belong to a project.
const (
	projectShop  = "demo-shop"
	projectDocs  = "demo-docs"
	projectCodex = "demo-codex"
	// projectBranch is the branch-per-task stage's: the agent runs in the
	// task's worktree, whose session is not the shop's.
	projectBranch = "demo-shop-branch"
)

const instructions = `You are a worker of the agentvisor demo. Work in your current directory.
When a task asks you to report progress, run the command it gives in your shell.`

// Prompts that a real model can follow too (with ANTHROPIC_API_KEY).
const (
	promptCommit = `Create a git repository here, add a file hello.txt containing "hello from agentvisor", commit it, ` +
		`then report progress by running: worker-wrapper progress --step "Committed hello.txt" --pct 100 --output "<the commit's subject>". ` +
		`Run each command on its own: the worker allows git commands and the progress call, one simple command at a time. ` +
		`Finish with the JSON {"status": "complete", "result": {"file": "hello.txt"}}.`
	promptRecall = `Which file did you commit in the previous task? Finish with the JSON {"status": "complete", "result": {"file": "<its name>"}}.`
	promptEgress = `Run git ls-remote https://example.com/agentvisor.git on its own and tell me whether it answered. ` +
		`Finish with the JSON {"status": "complete", "result": {"reachable": <true or false>}}.`
	promptClone = `Clone ` + gitCloneURL + ` with git on its own, then run git -C shop log --oneline and tell me its commits. ` +
		`Finish with the JSON {"status": "complete", "result": {"cloned": "shop"}}.`
	promptBranch = `Add a file NOTES.md to the shop's catalogue saying "Prices are in cents." Then run git push origin HEAD:refs/heads/release on its own. ` +
		`Finish with the JSON {"status": "complete", "result": {"file": "NOTES.md"}}.`
	promptApprove = `Run the shell command touch approved.txt on its own, then run git status --short. ` +
		`Finish with the JSON {"status": "complete", "result": {"file": "approved.txt"}}.`
	promptLong  = `Run the shell command sleep 30, then finish with the JSON {"status": "complete", "result": {}}.`
	promptCodex = `Create an empty file status.txt with touch, then report it by running: worker-wrapper progress --step "Created status.txt" --pct 100. ` +
		`Finish with the JSON {"status": "complete", "result": {"file": "status.txt"}}.`
	promptCodexRecall = `Which file did you create in the previous task? Finish with the JSON {"status": "complete", "result": {"file": "<its name>"}}.`
	promptDroid       = `Count the files in your current directory with ls -A, report it by running: worker-wrapper progress --step "Counted files" --pct 100 --output "<count> files". ` +
		`Finish with the JSON {"status": "complete", "result": {"files": <count>}}.`
)

// The workers' ALLOWED_COMMANDS: the agent CLIs refuse every other shell
// command, and a compound one (&&, ;, |, $(...)); the progress call is
// always allowed. The Claude worker asks its task's owner instead of
// refusing (AGENT_APPROVAL, workerEnv).
var (
	allowClaude = []string{"git.*"}
	allowDroid  = []string{"ls", "sleep"}
	allowCodex  = []string{"touch", "sleep"}
)

// workerEnv is the manager's WORKER_ENV: every worker keeps one agent
// process across its tasks (Claude's stream-json input, Droid's JSON-RPC
// mode), and a Claude worker asks its task's owner before a tool call
// ALLOWED_COMMANDS does not allow (Droid ignores AGENT_APPROVAL).
const workerEnv = `WORKER_ENV={"AGENT_PERSISTENT":"true","AGENT_APPROVAL":"true"}`

// stubPrices is the manager's MODEL_PRICES with the stub: Droid reports
// tokens, not dollars, and the wrapper prices what its proxy metered;
// the stub's Droid model (the wrapper's custom model, "agentvisor") gets
// Sonnet's price. Against the real API the defaults price
// claude-sonnet-4-5.
const stubPrices = `MODEL_PRICES={"agentvisor": {"input": 3, "output": 15, "cache_read": 0.3, "cache_write": 3.75}, ` +
	`"gpt-stub": {"input": 1.25, "output": 10, "cache_read": 0.125, "cache_write": 0}}`

// bash is a call of Claude's shell tool.
func bash(description, command string) *stubmodel.ToolUse {
	return &stubmodel.ToolUse{Name: "Bash", Input: map[string]any{"description": description, "command": command}}
}

// What the stub model answers to each task, in the agents' tool formats.
var (
	scriptEgress = stubmodel.Script{Steps: []stubmodel.Step{
		{ToolUse: bash("reach a host off the allowlist", "git ls-remote https://example.com/agentvisor.git")},
		{Text: "The host did not answer: the worker may not reach it.\n{\"status\": \"complete\", \"result\": {\"reachable\": false}}"},
	}}
	// The clone's last answer is held back a few seconds: the agent waits
	// for it, running, while the demo looks for the token in its container
	// (a worker is paused right after its output).
	scriptClone = stubmodel.Script{Steps: []stubmodel.Step{
		{ToolUse: bash("clone the shop's repository", "git clone -q "+gitCloneURL)},
		{ToolUse: bash("show its history", "git -C shop log --oneline")},
		{Text: "Cloned shop.git: one commit.\n{\"status\": \"complete\", \"result\": {\"cloned\": \"shop\"}}", DelayMS: 6000},
	}}
	// The agent writes a file in the task's worktree and leaves it
	// uncommitted (the wrapper commits and pushes it), and tries a push to
	// a branch of its own choosing, which the gateway refuses.
	scriptBranch = stubmodel.Script{Steps: []stubmodel.Step{
		{ToolUse: &stubmodel.ToolUse{Name: "Write", Input: map[string]any{"file_path": "NOTES.md", "content": "Prices are in cents.\n"}}},
		{ToolUse: bash("push to a release branch", "git push origin HEAD:refs/heads/release")},
		{Text: "NOTES.md is written; the push to release was refused.\n{\"status\": \"complete\", \"result\": {\"file\": \"NOTES.md\"}}"},
	}}
	scriptCommit = stubmodel.Script{Steps: []stubmodel.Step{
		{Text: "I will create the repository, commit the file and report progress.", ToolUse: bash("create the repository", "git init -q .")},
		{ToolUse: &stubmodel.ToolUse{Name: "Write", Input: map[string]any{"file_path": "hello.txt", "content": "hello from agentvisor\n"}}},
		{ToolUse: bash("stage hello.txt", "git add hello.txt")},
		{ToolUse: bash("commit hello.txt", `git -c user.name=demo -c user.email=demo@localhost commit -qm "Add hello.txt"`)},
		{ToolUse: bash("report progress", `worker-wrapper progress --step "Committed hello.txt" --pct 100 --output "Add hello.txt"`)},
		{Text: "hello.txt is committed.\n{\"status\": \"complete\", \"result\": {\"file\": \"hello.txt\"}}"},
	}}
	scriptCodex = stubmodel.Script{Steps: []stubmodel.Step{
		{ToolUse: bash("create status.txt", "touch status.txt")},
		{ToolUse: bash("report progress", `worker-wrapper progress --step "Created status.txt" --pct 100`)},
		{Text: "status.txt is there.\n{\"status\": \"complete\", \"result\": {\"file\": \"status.txt\"}}"},
	}}
	scriptCodexLong = stubmodel.Script{Steps: []stubmodel.Step{
		{ToolUse: bash("wait", "sleep 30")},
		{Text: "Slept.\n{\"status\": \"complete\", \"result\": {}}"},
	}}
	scriptCodexRecall = stubmodel.Script{Steps: []stubmodel.Step{
		{Text: "In the previous task I created status.txt.\n{\"status\": \"complete\", \"result\": {\"file\": \"status.txt\"}}"},
	}}
	scriptRecall = stubmodel.Script{Steps: []stubmodel.Step{
		{Text: "In the previous task I committed hello.txt.\n{\"status\": \"complete\", \"result\": {\"file\": \"hello.txt\"}}"},
	}}
	scriptApprove = stubmodel.Script{Steps: []stubmodel.Step{
		{ToolUse: bash("create approved.txt", "touch approved.txt")},
		{ToolUse: bash("show the new file", "git status --short")},
		{Text: "approved.txt is there.\n{\"status\": \"complete\", \"result\": {\"file\": \"approved.txt\"}}"},
	}}
	scriptLong = stubmodel.Script{Steps: []stubmodel.Step{
		{ToolUse: &stubmodel.ToolUse{Name: "Execute", Input: map[string]any{
			"command": "sleep 30", "riskLevel": "low", "riskLevelReason": "waits"}}},
		{Text: "Slept.\n{\"status\": \"complete\", \"result\": {}}"},
	}}
	scriptDroid = stubmodel.Script{Steps: []stubmodel.Step{
		{ToolUse: &stubmodel.ToolUse{Name: "Execute", Input: map[string]any{
			"command": "ls -A", "riskLevel": "low", "riskLevelReason": "reads the directory"}}},
		{ToolUse: &stubmodel.ToolUse{Name: "Execute", Input: map[string]any{
			"command":   `worker-wrapper progress --step "Counted files" --pct 100 --output "1 files"`,
			"riskLevel": "low", "riskLevelReason": "reports progress"}}},
		{Text: "Counted.\n{\"status\": \"complete\", \"result\": {\"files\": 1}}"},
	}}
)
