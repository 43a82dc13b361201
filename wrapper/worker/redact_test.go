package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/stubmodel"
)

func TestRedactJSON(t *testing.T) {
	r := NewRedactor([]string{"DB_PASSWORD=hunter2-secret", `ODD_TOKEN=quo"te\slash`}, "")
	tests := []struct{ name, in, want string }{
		{"nested", `{"a":"x hunter2-secret y","b":[1,{"hunter2-secret":["hunter2-secret"]}],"n":12345678901234567890}`,
			`{"a":"x [REDACTED] y","b":[1,{"[REDACTED]":["[REDACTED]"]}],"n":12345678901234567890}`},
		{"escaped secret", `{"k":"quo\"te\\slash"}`, `{"k":"[REDACTED]"}`},
		{"not json", `hunter2-secret{`, `"[REDACTED]{"`},
		{"empty", ``, ``},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(r.RedactJSON(json.RawMessage(tt.in))); got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
	m := r.RedactMap(map[string]any{"note": "hunter2-secret", "deep": map[string]any{"l": []any{"hunter2-secret"}}})
	if b, _ := json.Marshal(m); strings.Contains(string(b), "hunter2") {
		t.Errorf("metadata kept the secret: %s", b)
	}
}

// dumpRedis returns every key of the Redis and its whole content, except
// the keys skip names.
func dumpRedis(t *testing.T, rc *redis.Client, skip map[string]bool) map[string]string {
	t.Helper()
	ctx := context.Background()
	keys, err := rc.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, k := range keys {
		if skip[k] {
			continue
		}
		var v any
		switch typ, _ := rc.Type(ctx, k).Result(); typ {
		case "string":
			v, err = rc.Get(ctx, k).Result()
		case "hash":
			v, err = rc.HGetAll(ctx, k).Result()
		case "stream":
			v, err = rc.XRange(ctx, k, "-", "+").Result()
		case "list":
			v, err = rc.LRange(ctx, k, 0, -1).Result()
		case "set":
			v, err = rc.SMembers(ctx, k).Result()
		case "zset":
			v, err = rc.ZRangeWithScores(ctx, k, 0, -1).Result()
		default:
			t.Fatalf("key %s of type %s", k, typ)
		}
		if err != nil {
			t.Fatal(err)
		}
		out[k] = fmt.Sprint(v)
	}
	return out
}

// A secret of the worker's environment that the agent prints (in its
// result, nested; its question; a progress step and output; its response)
// or that a producer put in a task's metadata is in no Redis entry the
// worker writes.
func TestPlantedSecretReachesNoRedisEntry(t *testing.T) {
	const secret = "planted-s3cr3t-9f8e7d"
	e, stub, environ := realAgentEnv(t, protocol.AgentClaude)
	e.cfg.AllowedCommands, _ = protocol.ParseAllowedCommands([]string{"*"})
	e.start(append(environ, "DEPLOY_TOKEN="+secret)...)
	in, out := e.keys.Input(e.cfg.WorkerID), e.keys.Output(e.cfg.WorkerID)

	stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{
		{ToolUse: shellTool(protocol.AgentClaude, `echo "$DEPLOY_TOKEN"`)},
		{ToolUse: shellTool(protocol.AgentClaude, `worker-wrapper progress --step "using `+secret+`" --output "token=`+secret+`"`)},
		{Text: "The token is " + secret + ".\n{\"status\": \"complete\", \"result\": {\"token\": \"" + secret + "\", \"deep\": [{\"" + secret + "\": [\"x " + secret + "\"]}]}}"},
	}})
	e.send(in, protocol.Task{RequestID: "leak-1", Prompt: "Print the token.", Metadata: map[string]any{"note": secret, "n": []any{secret}}})
	o := e.waitOutputs(out, 1, 60*time.Second)[0]
	if o.Status != protocol.StatusComplete || !strings.Contains(string(o.Result), "[REDACTED]") {
		t.Fatalf("output %+v (result %s, error %+v)", o, o.Result, o.Error)
	}
	stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{
		{Text: "{\"status\": \"blocked\", \"question\": \"Is " + secret + " the right token?\"}"},
	}})
	e.send(in, protocol.Task{RequestID: "leak-2", Prompt: "Ask."})
	if o := e.waitOutputs(out, 2, 60*time.Second)[1]; o.Status != protocol.StatusBlocked || !strings.Contains(o.Question, "[REDACTED]") {
		t.Fatalf("blocked output %+v", o)
	}
	_, prog := e.docs(out)
	if len(prog) == 0 {
		t.Fatal("no progress event: the step with the secret was not published at all")
	}
	// The input stream holds what the producer sent (the metadata with the
	// secret): it is the producer's entry, not one the worker wrote.
	for k, v := range dumpRedis(t, e.rc, map[string]bool{in: true}) {
		if strings.Contains(v, secret) {
			t.Errorf("the secret is in %s: %s", k, v)
		}
	}
}
