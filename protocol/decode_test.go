package protocol

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// decoders maps a schema file to the Go decoder of its documents.
var decoders = map[string]func([]byte) (any, error){
	"task.schema.json":               func(b []byte) (any, error) { return DecodeTask(b) },
	"cancel.schema.json":             func(b []byte) (any, error) { return DecodeCancel(b) },
	"message.schema.json":            func(b []byte) (any, error) { return DecodeMessage(b) },
	"permission_request.schema.json": func(b []byte) (any, error) { return DecodePermissionRequest(b) },
	"permission_reply.schema.json":   func(b []byte) (any, error) { return DecodePermissionReply(b) },
	"output.schema.json":             func(b []byte) (any, error) { return DecodeOutput(b) },
	"progress.schema.json":           func(b []byte) (any, error) { return DecodeProgress(b) },
	"lifecycle.schema.json":          func(b []byte) (any, error) { return DecodeLifecycle(b) },
	"heartbeat.schema.json":          func(b []byte) (any, error) { return DecodeHeartbeat(b) },
	"command.schema.json":            func(b []byte) (any, error) { return DecodeCommand(b) },
	"reply.schema.json":              func(b []byte) (any, error) { return DecodeReply(b) },
	"control.schema.json":            func(b []byte) (any, error) { return DecodeControl(b) },
	"stop_output.schema.json": func(b []byte) (any, error) {
		return DecodeStopOutput(b)
	},
	"progress_report.schema.json": func(b []byte) (any, error) { return DecodeProgressReport(b) },
	"adopt.schema.json":           func(b []byte) (any, error) { return DecodeAdopt(b) },
}

func TestRoundTrip(t *testing.T) {
	for schema, docs := range samples() {
		for i, doc := range docs {
			t.Run(schema, func(t *testing.T) {
				b, err := doc.Encode()
				if err != nil {
					t.Fatal(err)
				}
				got, err := decoders[schema](b)
				if err != nil {
					t.Fatalf("sample %d does not decode: %v\n%s", i, err, b)
				}
				b2, _ := got.(encoder).Encode()
				if string(b) != string(b2) {
					t.Fatalf("sample %d changed in a round trip:\n%s\n%s", i, b, b2)
				}
			})
		}
	}
}

func TestDecodeTaskErrorsNameTheField(t *testing.T) {
	long := strings.Repeat("x", MaxIDLen+1)
	tests := []struct {
		name, doc, field string
	}{
		{"not json", `{"v":1,`, ""},
		{"array", `[1,2]`, ""},
		{"empty", ``, ""},
		{"no version", `{"type":"task","request_id":"r","prompt":"p"}`, "v"},
		{"future version", `{"v":2,"type":"task","request_id":"r","prompt":"p"}`, "v"},
		{"wrong type", `{"v":1,"type":"output","request_id":"r","prompt":"p"}`, "type"},
		{"no type", `{"v":1,"request_id":"r","prompt":"p"}`, "type"},
		{"no request_id", `{"v":1,"type":"task","prompt":"p"}`, "request_id"},
		{"request_id with space", `{"v":1,"type":"task","request_id":"a b","prompt":"p"}`, "request_id"},
		{"request_id too long", `{"v":1,"type":"task","request_id":"` + long + `","prompt":"p"}`, "request_id"},
		{"request_id a number", `{"v":1,"type":"task","request_id":7,"prompt":"p"}`, "request_id"},
		{"no prompt", `{"v":1,"type":"task","request_id":"r"}`, "prompt"},
		{"empty prompt", `{"v":1,"type":"task","request_id":"r","prompt":""}`, "prompt"},
		{"negative timeout", `{"v":1,"type":"task","request_id":"r","prompt":"p","timeout_seconds":-1}`, "timeout_seconds"},
		{"timeout a string", `{"v":1,"type":"task","request_id":"r","prompt":"p","timeout_seconds":"10m"}`, "timeout_seconds"},
		{"unknown field", `{"v":1,"type":"task","request_id":"r","prompt":"p","promt":"x"}`, "promt"},
		{"force_new_session a string", `{"v":1,"type":"task","request_id":"r","prompt":"p","force_new_session":"yes"}`, "force_new_session"},
		{"project_id with newline", `{"v":1,"type":"task","request_id":"r","prompt":"p","project_id":"a\nb"}`, "project_id"},
		{"trailing data", `{"v":1,"type":"task","request_id":"r","prompt":"p"} {}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeTask([]byte(tt.doc))
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("err = %v, want a *DecodeError", err)
			}
			if de.Field != tt.field || de.Type != TypeTask {
				t.Fatalf("field = %q (type %q), want %q: %v", de.Field, de.Type, tt.field, err)
			}
			if tt.field != "" && !strings.Contains(err.Error(), "field "+tt.field) {
				t.Fatalf("message %q does not name the field", err)
			}
		})
	}
}

func TestDecodeOtherErrorsNameTheField(t *testing.T) {
	tests := []struct {
		name, schema, doc, field string
	}{
		{"output failed without error", "output.schema.json",
			`{"v":1,"type":"output","request_id":"r","worker_id":"w","status":"failed","usage":{"input":0,"output":0,"cache_read":0,"cache_creation":0},"context_tokens":0,"cost_usd":0,"duration_ms":0,"timestamp":"2026-01-01T00:00:00Z"}`, "error"},
		{"output unknown status", "output.schema.json",
			`{"v":1,"type":"output","request_id":"r","worker_id":"w","status":"done","usage":{"input":0,"output":0,"cache_read":0,"cache_creation":0},"context_tokens":0,"cost_usd":0,"duration_ms":0,"timestamp":"2026-01-01T00:00:00Z"}`, "status"},
		{"output result an array", "output.schema.json",
			`{"v":1,"type":"output","request_id":"r","worker_id":"w","status":"complete","result":[1],"usage":{"input":0,"output":0,"cache_read":0,"cache_creation":0},"context_tokens":0,"cost_usd":0,"duration_ms":0,"timestamp":"2026-01-01T00:00:00Z"}`, "result"},
		{"output negative usage", "output.schema.json",
			`{"v":1,"type":"output","request_id":"r","worker_id":"w","status":"complete","usage":{"input":-1,"output":0,"cache_read":0,"cache_creation":0},"context_tokens":0,"cost_usd":0,"duration_ms":0,"timestamp":"2026-01-01T00:00:00Z"}`, "usage.input"},
		{"output bad error code", "output.schema.json",
			`{"v":1,"type":"output","request_id":"r","worker_id":"w","status":"failed","error":{"code":"OOPS","message":"m","retryable":false},"usage":{"input":0,"output":0,"cache_read":0,"cache_creation":0},"context_tokens":0,"cost_usd":0,"duration_ms":0,"timestamp":"2026-01-01T00:00:00Z"}`, "error.code"},
		{"progress pct over 100", "progress.schema.json",
			`{"v":1,"type":"progress","worker_id":"w","request_id":"r","step":"s","progress_pct":101,"timestamp":"2026-01-01T00:00:00Z"}`, "progress_pct"},
		{"progress no step", "progress.schema.json",
			`{"v":1,"type":"progress","worker_id":"w","request_id":"r","timestamp":"2026-01-01T00:00:00Z"}`, "step"},
		{"lifecycle unknown event", "lifecycle.schema.json",
			`{"v":1,"type":"lifecycle","worker_id":"w","event":"exploded","source":"wrapper","timestamp":"2026-01-01T00:00:00Z"}`, "event"},
		{"lifecycle bad timestamp", "lifecycle.schema.json",
			`{"v":1,"type":"lifecycle","worker_id":"w","event":"started","source":"wrapper","timestamp":"yesterday"}`, "timestamp"},
		{"heartbeat bad status", "heartbeat.schema.json",
			`{"v":1,"type":"heartbeat","worker_id":"w","status":"napping","rss_bytes":1,"cpu_percent":0,"tasks_completed":0,"interval_ms":10,"timestamp":"2026-01-01T00:00:00Z"}`, "status"},
		{"command unknown action", "command.schema.json", `{"v":1,"type":"command","command_id":"c","action":"explode"}`, "action"},
		{"command create without spec", "command.schema.json", `{"v":1,"type":"command","command_id":"c","action":"create"}`, "spec"},
		{"command delete without worker", "command.schema.json", `{"v":1,"type":"command","command_id":"c","action":"delete"}`, "worker_id"},
		{"command bad agent", "command.schema.json", `{"v":1,"type":"command","command_id":"c","action":"create","spec":{"agent_type":"gpt"}}`, "spec.agent_type"},
		{"command bad capability", "command.schema.json", `{"v":1,"type":"command","command_id":"c","action":"create","spec":{"agent_type":"claude","capabilities":["FTP"]}}`, "spec.capabilities"},
		{"command bad pattern", "command.schema.json", `{"v":1,"type":"command","command_id":"c","action":"create","spec":{"agent_type":"claude","allowed_commands":["eng*"]}}`, "spec.allowed_commands"},
		{"command bad env name", "command.schema.json", `{"v":1,"type":"command","command_id":"c","action":"create","spec":{"agent_type":"claude","env":{"A-B":"x"}}}`, "spec.env"},
		{"command bad memory", "command.schema.json", `{"v":1,"type":"command","command_id":"c","action":"create","spec":{"agent_type":"claude","limits":{"memory":"lots"}}}`, "spec.limits.memory"},
		{"command mcp server without command or url", "command.schema.json", `{"v":1,"type":"command","command_id":"c","action":"create","spec":{"agent_type":"claude","mcp_servers":[{"name":"a"}]}}`, "spec.mcp_servers[0]"},
		{"command mcp server bad name", "command.schema.json", `{"v":1,"type":"command","command_id":"c","action":"create","spec":{"agent_type":"claude","mcp_servers":[{"name":"x","command":"y"},{"name":"a.b","command":"y"}]}}`, "spec.mcp_servers[1].name"},
		{"command mcp server bad url", "command.schema.json", `{"v":1,"type":"command","command_id":"c","action":"create","spec":{"agent_type":"claude","mcp_servers":[{"name":"a","url":"file:///x"}]}}`, "spec.mcp_servers[0].url"},
		{"command spec on delete", "command.schema.json", `{"v":1,"type":"command","command_id":"c","action":"delete","worker_id":"w","spec":{"agent_type":"claude"}}`, "spec"},
		{"command reset without agent", "command.schema.json", `{"v":1,"type":"command","command_id":"c","action":"reset_context","project_id":"p"}`, "agent_type"},
		{"reply not ok without error", "reply.schema.json", `{"v":1,"type":"reply","command_id":"c","action":"list","ok":false,"timestamp":"2026-01-01T00:00:00Z"}`, "error"},
		{"control bad action", "control.schema.json", `{"v":1,"type":"control","action":"kill","worker_id":"w","timestamp":"2026-01-01T00:00:00Z"}`, "action"},
		{"stop output blocked without question", "stop_output.schema.json", `{"status":"blocked"}`, "question"},
		{"stop output result a string", "stop_output.schema.json", `{"status":"complete","result":"done"}`, "result"},
		{"stop output unknown field", "stop_output.schema.json", `{"status":"complete","note":"x"}`, "note"},
		{"progress report no step", "progress_report.schema.json", `{"progress_pct":5}`, "step"},
		{"progress report pct a string", "progress_report.schema.json", `{"step":"s","progress_pct":"half"}`, "progress_pct"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decoders[tt.schema]([]byte(tt.doc))
			var de *DecodeError
			if !errors.As(err, &de) || de.Field != tt.field {
				t.Fatalf("err = %v, want field %q", err, tt.field)
			}
		})
	}
}

func TestEntryHelpers(t *testing.T) {
	doc, _ := NewTask("r", "p").Encode()
	vals := Values(doc)
	got, err := EntryData(vals)
	if err != nil || string(got) != string(doc) {
		t.Fatalf("EntryData = %s, %v", got, err)
	}
	if _, err := EntryData(map[string]any{"payload": "x"}); err == nil {
		t.Error("entry without data accepted")
	}
	if _, err := EntryData(map[string]any{"data": 5}); err == nil {
		t.Error("non-string data accepted")
	}
	v, typ, err := PeekType(doc)
	if err != nil || v != Version || typ != TypeTask {
		t.Errorf("PeekType = %d %q %v", v, typ, err)
	}
	if _, _, err := PeekType([]byte("nope")); err == nil {
		t.Error("PeekType accepted garbage")
	}
}

func TestEncodeSetsVersionAndType(t *testing.T) {
	for schema, docs := range samples() {
		for _, d := range docs {
			b, _ := d.Encode()
			var h header
			_ = json.Unmarshal(b, &h)
			want := Type(strings.TrimSuffix(schema, ".schema.json"))
			if h.V != Version || h.Type != want {
				t.Errorf("%s: encoded v=%d type=%q", schema, h.V, h.Type)
			}
		}
	}
	// A caller's wrong header is overwritten, not trusted.
	b, _ := Task{V: 9, Type: "x", RequestID: "r", Prompt: "p"}.Encode()
	if _, err := DecodeTask(b); err != nil {
		t.Fatalf("Encode kept a wrong header: %v", err)
	}
}

func TestListReplyAlwaysCarriesWorkers(t *testing.T) {
	doc, err := Reply{CommandID: "c1", Action: ActionList, OK: true, Timestamp: time.Now()}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), `"workers":[]`) {
		t.Fatalf("empty list reply %s", doc)
	}
	r, err := DecodeReply(doc)
	if err != nil || r.Workers == nil || len(r.Workers) != 0 {
		t.Fatalf("decoded %+v %v", r, err)
	}
	if doc, _ := (Reply{CommandID: "c2", Action: ActionStatus, OK: true}).Encode(); strings.Contains(string(doc), "workers") {
		t.Fatalf("a status reply names workers: %s", doc)
	}
}

func TestCommandAgentTypeSpellings(t *testing.T) {
	for in, want := range map[string]AgentType{"CLAUDE": AgentClaude, "FACTORY": AgentDroid, "droid": AgentDroid, "claude-code": AgentClaude} {
		doc := `{"v":1,"type":"command","command_id":"c1","action":"create","timestamp":"2026-11-21T09:30:00Z","spec":{"agent_type":"` + in + `"}}`
		c, err := DecodeCommand([]byte(doc))
		if err != nil || c.Spec.AgentType != want {
			t.Errorf("%s: %v %v", in, c.Spec, err)
		}
	}
	doc := `{"v":1,"type":"command","command_id":"c1","action":"create","timestamp":"2026-11-21T09:30:00Z","spec":{"agent_type":"gpt"}}`
	if _, err := DecodeCommand([]byte(doc)); err == nil {
		t.Error("unknown agent type accepted")
	}
}

func TestSpecEnvCannotSetReservedVariables(t *testing.T) {
	for _, name := range []string{"WORKER_ID", "ALLOWED_COMMANDS", "AGENT_BIN", "AGENT_ARGS", "HEARTBEAT_INTERVAL", "REDIS_URL",
		"ANTHROPIC_API_KEY", "LD_PRELOAD", "PATH", "worker_id", "STREAM_MAXLEN"} {
		err := WorkerSpec{AgentType: AgentClaude, Env: map[string]string{name: "x"}}.Validate()
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("env %s: %v, want an error naming it", name, err)
		}
	}
	if err := (WorkerSpec{AgentType: AgentClaude, Env: map[string]string{"GIT_AUTHOR_NAME": "bot", "NODE_OPTIONS": "x"}}).Validate(); err != nil {
		t.Errorf("ordinary variables refused: %v", err)
	}
}

func TestSpecMemoryLimitHasAFloor(t *testing.T) {
	for _, m := range []string{"0", "5m", "1k", "6000000"} {
		if err := (WorkerSpec{AgentType: AgentClaude, Limits: Limits{Memory: m}}).Validate(); err == nil {
			t.Errorf("memory %s accepted", m)
		}
	}
	for _, m := range []string{"6m", "512m", "1g", "7000000"} {
		if err := (WorkerSpec{AgentType: AgentClaude, Limits: Limits{Memory: m}}).Validate(); err != nil {
			t.Errorf("memory %s refused: %v", m, err)
		}
	}
}

func TestSpecDiskLimitIsASizeWithAFloor(t *testing.T) {
	for _, d := range []string{"0", "15m", "-1g", "10 g", "10gb", "lots", "1t"} {
		err := (WorkerSpec{AgentType: AgentClaude, Limits: Limits{Disk: d}}).Validate()
		if err == nil || !strings.Contains(err.Error(), "limits.disk") {
			t.Errorf("disk %q: %v, want an error naming limits.disk", d, err)
		}
	}
	for _, d := range []string{"16m", "512m", "10g", "20000000"} {
		if err := (WorkerSpec{AgentType: AgentClaude, Limits: Limits{Disk: d}}).Validate(); err != nil {
			t.Errorf("disk %s refused: %v", d, err)
		}
	}
}

func TestMCPServersEnvRoundTrip(t *testing.T) {
	servers := []MCPServer{{Name: "t", Command: "testmcp", Args: []string{"-v"}, Env: map[string]string{"TAG": "x"}}, {Name: "h", URL: "http://127.0.0.1:1/mcp"}}
	v, err := EncodeMCPServers(servers)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseMCPServersEnv(v)
	if err != nil || len(got) != 2 || got[0].Env["TAG"] != "x" || got[1].URL != servers[1].URL {
		t.Fatalf("ParseMCPServersEnv(%s) = %+v, %v", v, got, err)
	}
	if got, err := ParseMCPServersEnv(""); err != nil || got != nil {
		t.Fatalf("empty: %v, %v", got, err)
	}
	for _, bad := range []string{"{", `[{"name":"a"}]`, `[{"name":"a","command":"x"},{"name":"a","command":"y"}]`} {
		if _, err := ParseMCPServersEnv(bad); err == nil {
			t.Errorf("ParseMCPServersEnv(%s) accepted", bad)
		}
	}
	many := make([]MCPServer, MaxMCPServers+1)
	for i := range many {
		many[i] = MCPServer{Name: fmt.Sprintf("s%d", i), Command: "x"}
	}
	if _, err := EncodeMCPServers(many); err == nil {
		t.Error("too many servers accepted")
	}
}

// An adopt document's credential_hosts become the adopted wrapper's
// CREDENTIAL_HOSTS: each is a host name or an IP literal, or the document
// is refused, naming the field.
func TestDecodeAdoptCredentialHosts(t *testing.T) {
	for _, bad := range []string{`""`, `"a,b"`, `"git.example.com:443"`, `"fe80::1%eth0"`, `"[10.0.0.1]"`, `"a b"`, `"UPPER.example.com"`} {
		doc := `{"v":1,"type":"adopt","worker_id":"w","redis_user":"agentvisor:worker:w","credential_hosts":[` + bad + `]}`
		_, err := DecodeAdopt([]byte(doc))
		var de *DecodeError
		if !errors.As(err, &de) || de.Field != "credential_hosts" {
			t.Errorf("credential_hosts [%s]: %v, want an error naming the field", bad, err)
		}
	}
	a, err := DecodeAdopt([]byte(`{"v":1,"type":"adopt","worker_id":"w","redis_user":"agentvisor:worker:w","credential_hosts":["git.example.com","10.0.0.7","[fd00::7]","2001:db8::1"]}`))
	if err != nil || len(a.CredentialHosts) != 4 {
		t.Fatalf("%+v %v", a, err)
	}
}

func TestSpecRuntime(t *testing.T) {
	for _, tc := range []struct {
		name    string
		runtime Runtime
		ok      bool
	}{
		{"unset", "", true},
		{"runc", RuntimeRunc, true},
		{"gvisor", RuntimeGVisor, true},
		{"runsc is the engine's word, not the spec's", "runsc", false},
		{"case matters", "gVisor", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := WorkerSpec{AgentType: AgentClaude, Runtime: tc.runtime}.Validate()
			if (err == nil) != tc.ok || (err != nil && !strings.Contains(err.Error(), "spec.runtime")) {
				t.Fatalf("runtime %q: %v", tc.runtime, err)
			}
		})
	}
	doc := `{"v":1,"type":"command","command_id":"c1","action":"create","spec":{"agent_type":"claude","runtime":"kata"}}`
	if _, err := DecodeCommand([]byte(doc)); err == nil || !strings.Contains(err.Error(), "spec.runtime") {
		t.Fatalf("runtime kata decoded: %v", err)
	}
}
