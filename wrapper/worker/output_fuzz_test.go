package worker

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/wrapper/agent"
)

// The whole path from what an agent prints to the Output the wrapper
// stores: its lines through the CLI's parser (Claude's stream-json,
// Droid's JSON lines or its JSON-RPC, Codex's exec --json or its
// app-server), the verdict, the output built from them, and the output's
// encoding as storeOutput makes it. Whatever the agent printed, with or without a schema and
// whatever its exit, the path ends in exactly one output that decodes,
// for the task's request id: nothing the agent prints can end the process
// or leave a task unanswered.
func FuzzAgentOutputToStoredOutput(f *testing.F) {
	for _, dir := range []string{"../agent/testdata/reference", "../agent/testdata/captured", "../agent/testdata/codex"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
		for _, p := range files {
			b, err := os.ReadFile(p)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b, uint8(0), false, 0)
			f.Add(b, uint8(1), true, 1)
			f.Add(b, uint8(3), false, 1)
		}
	}
	for _, s := range []string{
		`{"type":"result","subtype":"success","is_error":false,"result":"done {\"status\": \"cancelled\"}","session_id":"s"}`,
		`{"type":"result","subtype":"success","is_error":false,"result":"x","structured_output":{"status":"cancelled"},"session_id":"s"}`,
		`{"type":"result","subtype":"success","is_error":false,"result":"x","structured_output":{"status":"blocked"},"usage":{"input_tokens":-5,"output_tokens":9e30}}`,
		`{"type":"result","subtype":"success","is_error":false,"result":"\u0000\u001b[31m\xff\xfe {\"status\":\"complete\",\"result\":{\"a\":[[[[[[[[[[1]]]]]]]]]]}}","total_cost_usd":-1}`,
		`{"type":"assistant","message":{"id":"m","usage":{"input_tokens":9223372036854775807,"cache_read_input_tokens":9223372036854775807}}}`,
		`{"type":"completion","finalText":"{\"status\":\"failed\"}","usage":{"input_tokens":-1},"session_id":"d"}`,
		`{"jsonrpc":"2.0","method":"droid.session_notification","params":{"notification":{"type":"agent_turn_completed","reason":"completed","tokenUsage":{"inputTokens":-7}}}}`,
		`{"type":"item.completed","item":{"type":"agent_message","text":"{\"status\":\"cancelled\"}"}}` + "\n" + `{"type":"turn.completed","usage":{"input_tokens":5,"cached_input_tokens":9e30,"output_tokens":-3}}`,
		`{"type":"turn.failed","error":{"message":"unexpected status 999 x"}}`,
		`{"id":"agentvisor-turn-1","result":{"turn":{"id":"t"}}}` + "\n" + `{"method":"item/completed","params":{"turnId":"t","item":{"type":"agentMessage","text":"{\"status\":\"cancelled\"}"}}}` +
			"\n" + `{"method":"thread/tokenUsage/updated","params":{"turnId":"t","tokenUsage":{"last":{"inputTokens":-4,"cachedInputTokens":9e30}}}}` +
			"\n" + `{"method":"turn/completed","params":{"turn":{"id":"t","status":"failed","error":{"codexErrorInfo":{"x":{"httpStatusCode":99999}}}}}}`,
	} {
		for k := uint8(0); k < 5; k++ {
			f.Add([]byte(s), k, k == 1, int(k))
		}
	}
	f.Fuzz(func(t *testing.T, out []byte, parser uint8, schema bool, exit int) {
		agentType, p := fuzzParser(parser)
		o, err := agent.Replay(bytes.NewReader(out), p)
		if err != nil {
			t.Fatalf("replay: %v", err)
		}
		o.Exit = agent.ExitStatus{Code: exit % 256}
		o.Duration = time.Second
		w := fuzzWorker(agentType)
		task := protocol.Task{RequestID: "fuzz-1", ProjectID: "p", Prompt: "x"}
		v := agent.Judge(o, schema)
		stored, doc, err := encodeOutput(slog.New(slog.NewTextHandler(io.Discard, nil)), w.redact, w.now, w.output(task, o, v, SessionPlan{}, 1))
		if err != nil {
			t.Fatalf("no output can be stored: %v", err)
		}
		back, err := protocol.DecodeOutput(doc)
		if err != nil {
			t.Fatalf("the stored output does not decode: %v\n%s", err, doc)
		}
		if back.RequestID != task.RequestID || back.Status != stored.Status || !back.Status.Valid() {
			t.Fatalf("stored %+v, decoded %+v", stored, back)
		}
		if back.Status == protocol.StatusCancelled {
			t.Fatalf("the agent's output made a cancelled output: %+v", back)
		}
	})
}

func fuzzParser(k uint8) (protocol.AgentType, agent.Parser) {
	switch k % 5 {
	case 4:
		return protocol.AgentCodex, agent.NewCodexAppServer(agent.CodexSession{}, "")
	case 3:
		return protocol.AgentCodex, &agent.CodexParser{}
	case 1:
		return protocol.AgentDroid, agent.DroidParser{}
	case 2:
		return protocol.AgentDroid, agent.NewDroidRPC(agent.DroidSession{}, "")
	}
	return protocol.AgentClaude, agent.ClaudeParser{}
}

func fuzzWorker(agentType protocol.AgentType) outputs {
	return outputs{workerID: "w-fuzz", agentType: agentType, redact: NewRedactor(nil, ""),
		now: func() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }}
}
