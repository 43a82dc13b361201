package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

// ALLOWED_COMMANDS (wrapper/README.md, "ALLOWED_COMMANDS") reaches each
// CLI as its adapter says (package agent): Claude enforces it with its
// own permission rules and reports what it denied (publisher.denial); Droid asks
// the wrapper before each shell command, through a hook that runs
// `worker-wrapper guard` (GuardCommand), which the wrapper decides here
// (checkCommand). Every refusal is published as a warning of the task.

// guardRequest is what `worker-wrapper guard` asks the wrapper (POST
// /guard): may this tool call run?
type guardRequest struct {
	Tool    string `json:"tool"`
	Command string `json:"command"`
}

type guardAnswer struct {
	Allow  bool   `json:"allow"`
	Reason string `json:"reason,omitempty"`
}

// checkCommand decides a shell command of the run that token belongs to,
// and publishes a refusal as a warning of that run.
func (p *progressServer) checkCommand(token string, req guardRequest) guardAnswer {
	cur, own := p.state.owner(token)
	ans := guardAnswer{Allow: true}
	switch {
	case !own:
		ans = guardAnswer{Reason: "refused by agentvisor: the call does not belong to the running task"}
	case !p.allowed.AllowsShell(req.Command):
		ans = guardAnswer{Reason: "refused by agentvisor: not in this worker's ALLOWED_COMMANDS (a simple command whose first words name an allowed command; no ;, &, |, redirections or $)"}
	}
	if !ans.Allow && cur != nil {
		p.pub.refusal(cur, req.Tool, req.Command, ans.Reason, "")
	}
	return ans
}

// cutUTF8 cuts s to at most n bytes without splitting a character.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && s[len(s)-1]&0xC0 == 0x80 {
		s = s[:len(s)-1]
	}
	if len(s) > 0 && s[len(s)-1] >= 0xC0 {
		s = s[:len(s)-1]
	}
	return s
}

// GuardCommand is `worker-wrapper guard`, Droid's PreToolUse hook: it
// reads the hook's JSON on stdin and asks the wrapper whether the command
// may run. Exit 0 lets it run; exit 2 refuses it, with the reason on
// stderr (which Droid hands to the model). Anything that goes wrong
// refuses: the guard fails closed.
func GuardCommand(stdin io.Reader, getenv func(string) string, stderr io.Writer) int {
	refuse := func(format string, a ...any) int {
		fmt.Fprintf(stderr, format+"\n", a...)
		return 2
	}
	b, err := io.ReadAll(io.LimitReader(stdin, 4<<20))
	if err != nil {
		return refuse("refused by agentvisor: read the hook input: %v", err)
	}
	var hook struct {
		ToolName  string `json:"tool_name"`
		ToolInput struct {
			Command string `json:"command"`
		} `json:"tool_input"`
	}
	if err := json.Unmarshal(b, &hook); err != nil {
		return refuse("refused by agentvisor: the hook input is not JSON: %v", err)
	}
	url, ok := strings.CutSuffix(getenv("WORKER_PROGRESS_URL"), "/progress")
	if !ok {
		return refuse("refused by agentvisor: WORKER_PROGRESS_URL is not set")
	}
	body, _ := json.Marshal(guardRequest{Tool: hook.ToolName, Command: hook.ToolInput.Command})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/guard", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(ProgressTokenHeader, getenv("WORKER_PROGRESS_TOKEN"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return refuse("refused by agentvisor: the wrapper did not answer: %v", err)
	}
	defer resp.Body.Close()
	var ans guardAnswer
	if err := json.NewDecoder(io.LimitReader(resp.Body, 8192)).Decode(&ans); err != nil || resp.StatusCode != http.StatusOK {
		return refuse("refused by agentvisor: the wrapper answered %s", resp.Status)
	}
	if !ans.Allow {
		return refuse("%s", ans.Reason)
	}
	return 0
}

var errGuardBody = errors.New("guard: want {\"tool\":...,\"command\":...}")

func (p *progressServer) guard(rw http.ResponseWriter, r *http.Request) {
	var req guardRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, 4<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeJSON(rw, http.StatusBadRequest, apiError{protocol.CodeInvalidTask, errGuardBody.Error()})
		return
	}
	writeJSON(rw, http.StatusOK, p.checkCommand(r.Header.Get(ProgressTokenHeader), req))
}
