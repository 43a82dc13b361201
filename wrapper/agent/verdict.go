package agent

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/agentvisor/agentvisor/protocol"
)

// Verdict is how a task ended, decided from an agent's Outcome.
type Verdict struct {
	Status   protocol.OutputStatus
	Response string
	Result   json.RawMessage
	Question string
	Error    *protocol.Error
	// Rule names the rule of Judge that decided, for logs and tests.
	Rule string
}

// MaxStderrInError bounds the stderr tail an error message carries.
const MaxStderrInError = 4 << 10

// Judge reconciles an agent's exit and its result line into one definite
// status, by these rules, in order (PROTOCOL.md, "Exit code and result"):
//
//  1. The agent could not be started: failed, AGENT_CRASHED (exit 127 when
//     the program does not exist, 126 when it cannot be executed).
//  2. A check of the runner stopped the agent (Spec.Check: an MCP server
//     that did not start): failed, with the check's error.
//  3. The task's timeout passed before a result: failed, AGENT_TIMEOUT.
//  4. The agent printed no line for its stall timeout: failed,
//     AGENT_STALLED; the worker stopped (SIGTERM) before a result: failed,
//     TERMINATED.
//  5. A result line that is an error (is_error, Droid's error line):
//     failed, AGENT_ERROR, whatever the exit code.
//  6. A result line that is a success, whatever the exit code (a success
//     with exit 1 counts; so does a result whose process had to be killed
//     after it): the stop output decides. With a schema, Claude's
//     structured_output must be a valid stop output; without, the last
//     valid stop output in the final text. None: failed, NO_STOP_OUTPUT;
//     a structured_output that is no valid stop output (a status other
//     than complete, blocked, failed): failed, INVALID_STOP_OUTPUT.
//     A stop output that says failed: failed, TASK_FAILED.
//  7. No result line: failed, AGENT_CRASHED, with the exit code or signal,
//     whether it died before or after its init line, and the stderr tail
//     (an exit 0 without a result is a crash too).
func Judge(o Outcome, schemaGiven bool) Verdict {
	return complete(judge(o, schemaGiven))
}

// complete holds Judge to what an Output needs, whatever a rule returned:
// a status an Output may carry, and an error on every failed one. What an
// agent prints decides a verdict, so no rule may leave it half made.
func complete(v Verdict) Verdict {
	if !v.Status.ValidStop() {
		v = failed(v.Rule, protocol.CodeInvalidStopOutput, "the agent ended with the status %q, which a stop output may not have", truncate(string(v.Status), 64))
	}
	if v.Status == protocol.StatusFailed && v.Error == nil {
		v.Error = protocol.NewError(protocol.CodeInternalError, "a failed verdict (rule %s) carried no error", v.Rule)
	}
	return v
}

func judge(o Outcome, schemaGiven bool) Verdict {
	stderr := stderrTail(o.Stderr)
	switch {
	case o.StartErr != nil:
		return failed("start", protocol.CodeAgentCrashed, "%v (exit %d)", o.StartErr, o.Exit.Code)
	case o.Aborted != nil:
		return Verdict{Status: protocol.StatusFailed, Error: o.Aborted, Rule: "aborted"}
	case o.Result == nil && o.TimedOut:
		return failed("timeout", protocol.CodeAgentTimeout, "the agent ran past its timeout after %s and was stopped%s", o.Duration.Round(1e6), stderr)
	case o.Result == nil && o.Stalled:
		return failed("stalled", protocol.CodeAgentStalled, "the agent printed nothing for its stall timeout (STALL_TIMEOUT) and was stopped after %s%s", o.Duration.Round(1e6), stderr)
	case o.Result == nil && o.Cancelled:
		return failed("terminated", protocol.CodeTerminated, "the worker was stopped while the agent ran%s", stderr)
	case o.Result != nil && o.Result.IsError:
		r := o.Result
		v := failed("result-error", protocol.CodeAgentError, "the agent ended with an error (%s)%s: %s%s", errorDetail(o), exitNote(o), truncate(r.Text, 2000), stderr)
		v.Response = r.Text
		return v
	case o.Result != nil:
		return judgeResult(o, schemaGiven)
	}
	phase := "before its init line"
	if o.Init != nil {
		phase = "after its init line"
	}
	return failed("no-result", protocol.CodeAgentCrashed, "the agent ended without a result line (%s, %s)%s", o.Exit, phase, stderr)
}

func judgeResult(o Outcome, schemaGiven bool) Verdict {
	r := o.Result
	var (
		stop protocol.StopOutput
		ok   bool
		rule string
	)
	if schemaGiven {
		rule = "structured-output"
		if len(r.StructuredOutput) > 0 {
			var err error
			if stop, err = protocol.DecodeStopOutput(r.StructuredOutput); err != nil {
				v := failed("invalid-stop-output", protocol.CodeInvalidStopOutput, "the agent's structured_output is not a valid stop output: %s", truncate(err.Error(), 500))
				v.Response = r.Text
				return v
			}
			ok = true
		}
	} else {
		rule = "stop-json"
		stop, ok = protocol.FindStopOutput(r.Text)
	}
	if !ok && !schemaGiven && len(r.Text) > protocol.MaxStopSearch {
		v := failed("output-too-large", protocol.CodeOutputTooLarge, "the agent's final text is %d bytes, and its last %d MiB hold no valid stop output", len(r.Text), protocol.MaxStopSearch>>20)
		v.Response = r.Text
		return v
	}
	if !ok {
		what := "no valid stop output in its final text"
		if schemaGiven {
			what = "no valid structured_output, though a schema was given"
		}
		v := failed("no-stop-output", protocol.CodeNoStopOutput, "the agent ended well but gave %s", what)
		v.Response = r.Text
		return v
	}
	v := Verdict{Status: stop.Status, Response: r.Text, Result: stop.Result, Question: stop.Question, Rule: rule}
	if stop.Status == protocol.StatusFailed {
		v.Error = protocol.NewError(protocol.CodeTaskFailed, "the agent reported that it could not do the task: %s", truncate(r.Text, 2000))
	}
	return v
}

func failed(rule string, code protocol.Code, format string, args ...any) Verdict {
	return Verdict{Status: protocol.StatusFailed, Error: protocol.NewError(code, format, args...), Rule: rule}
}

// errorDetail says what failed in an error result: the model API's status
// and the agent's word for the error, from the result or else from the
// last API retry. Claude marks a failed API call as subtype "success" (with
// is_error), so a subtype is named only when it tells more
// (error_max_turns, error_during_execution).
func errorDetail(o Outcome) string {
	r := o.Result
	status, kind := r.APIErrorStatus, ""
	if o.APIError != nil {
		kind = o.APIError.Kind
	}
	if rt := o.LastRetry; rt != nil {
		if status == 0 {
			status = rt.Status
		}
		if kind == "" {
			kind = rt.Error
		}
	}
	var parts []string
	if status != 0 {
		parts = append(parts, fmt.Sprintf("API status %d", status))
	}
	if kind != "" {
		parts = append(parts, "API error "+kind)
	}
	if r.Subtype != "" && r.Subtype != "success" && r.Subtype != "error" {
		parts = append(parts, "subtype "+r.Subtype)
	}
	if len(parts) == 0 {
		return "no API status"
	}
	return strings.Join(parts, ", ")
}

func exitNote(o Outcome) string {
	if o.Exit.Code != 0 || o.Exit.Signaled {
		return ", " + o.Exit.String()
	}
	return ""
}

func stderrTail(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return ""
	}
	if len(s) > MaxStderrInError {
		s = "..." + s[len(s)-MaxStderrInError:]
	}
	return "; stderr: " + s
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
