package protocol

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

const schemaBaseURL = "https://agentvisor.dev/schema/v1/"

// compileSchemas compiles every shipped schema with format assertions on.
func compileSchemas(t testing.TB) map[string]*jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	for _, name := range SchemaNames() {
		b, _ := Schema(name)
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := c.AddResource(schemaBaseURL+name, doc); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	out := map[string]*jsonschema.Schema{}
	for _, name := range SchemaNames() {
		s, err := c.Compile(schemaBaseURL + name)
		if err != nil {
			t.Fatalf("compile %s: %v", name, err)
		}
		out[name] = s
	}
	return out
}

func validate(s *jsonschema.Schema, doc []byte) error {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return err
	}
	return s.Validate(inst)
}

func TestEncoderOutputMatchesSchemas(t *testing.T) {
	schemas := compileSchemas(t)
	for name, docs := range samples() {
		for i, d := range docs {
			b, err := d.Encode()
			if err != nil {
				t.Fatal(err)
			}
			if err := validate(schemas[name], b); err != nil {
				t.Errorf("%s sample %d fails its schema: %v\n%s", name, i, err, b)
			}
		}
	}
}

// Where the Go decoder refuses a document, the schema refuses it too: the
// two describe one contract.
func TestSchemasRefuseWhatDecodersRefuse(t *testing.T) {
	schemas := compileSchemas(t)
	refused := []struct{ schema, doc string }{
		{"task.schema.json", `{"v":1,"type":"task","prompt":"p"}`},
		{"cancel.schema.json", `{"v":1,"type":"cancel"}`},
		{"message.schema.json", `{"v":1,"type":"message","request_id":"r"}`},
		{"message.schema.json", `{"v":1,"type":"message","request_id":"r","text":""}`},
		{"cancel.schema.json", `{"v":1,"type":"cancel","request_id":"r","prompt":"p"}`},
		{"output.schema.json", `{"v":1,"type":"output","request_id":"r","worker_id":"w","status":"cancelled","usage":{"input":0,"output":0,"cache_read":0,"cache_creation":0},"context_tokens":0,"cost_usd":0,"duration_ms":0,"timestamp":"2026-01-01T00:00:00Z"}`},
		{"task.schema.json", `{"v":2,"type":"task","request_id":"r","prompt":"p"}`},
		{"task.schema.json", `{"v":1,"type":"task","request_id":"r","prompt":"p","x":1}`},
		{"task.schema.json", `{"v":1,"type":"task","request_id":"a b","prompt":"p"}`},
		{"task.schema.json", `{"v":1,"type":"task","request_id":"r","prompt":"p","timeout_seconds":-5}`},
		{"task.schema.json", `{"v":1,"type":"task","request_id":"r","prompt":"p","priority":"urgent"}`},
		{"output.schema.json", `{"v":1,"type":"output","request_id":"r","worker_id":"w","status":"failed","usage":{"input":0,"output":0,"cache_read":0,"cache_creation":0},"context_tokens":0,"cost_usd":0,"duration_ms":0,"timestamp":"2026-01-01T00:00:00Z"}`},
		{"output.schema.json", `{"v":1,"type":"output","request_id":"r","worker_id":"w","status":"blocked","usage":{"input":0,"output":0,"cache_read":0,"cache_creation":0},"context_tokens":0,"cost_usd":0,"duration_ms":0,"timestamp":"2026-01-01T00:00:00Z"}`},
		{"lifecycle.schema.json", `{"v":1,"type":"lifecycle","worker_id":"w","event":"started","source":"wrapper","timestamp":"yesterday"}`},
		{"command.schema.json", `{"v":1,"type":"command","command_id":"c","action":"create"}`},
		{"command.schema.json", `{"v":1,"type":"command","command_id":"c","action":"delete","worker_id":"w","spec":{"agent_type":"claude"}}`},
		{"command.schema.json", `{"v":1,"type":"command","command_id":"c","action":"create","spec":{"agent_type":"claude","allowed_commands":["eng*"]}}`},
		{"command.schema.json", `{"v":1,"type":"command","command_id":"c","action":"reset_context","project_id":"p"}`},
		{"command.schema.json", `{"v":1,"type":"command","command_id":"c","action":"create","timestamp":"2026-01-01T00:00:00Z","spec":{"agent_type":"claude","env":{"WORKER_ID":"w2"}}}`},
		{"command.schema.json", `{"v":1,"type":"command","command_id":"c","action":"create","timestamp":"2026-01-01T00:00:00Z","spec":{"agent_type":"claude","env":{"agent_bin":"/x"}}}`},
		{"command.schema.json", `{"v":1,"type":"command","command_id":"c","action":"create","timestamp":"2026-01-01T00:00:00Z","spec":{"agent_type":"claude","env":{"ALLOWED_COMMANDS":"*"}}}`},
		{"command.schema.json", `{"v":1,"type":"command","command_id":"c","action":"create","spec":{"agent_type":"claude","mcp_servers":[{"name":"a b","command":"x"}]}}`},
		{"command.schema.json", `{"v":1,"type":"command","command_id":"c","action":"create","spec":{"agent_type":"claude","mcp_servers":[{"name":"a"}]}}`},
		{"command.schema.json", `{"v":1,"type":"command","command_id":"c","action":"create","spec":{"agent_type":"claude","mcp_servers":[{"name":"a","command":"x","url":"http://h/mcp"}]}}`},
		{"command.schema.json", `{"v":1,"type":"command","command_id":"c","action":"create","spec":{"agent_type":"claude","mcp_servers":[{"name":"a","url":"ftp://h"}]}}`},
		{"command.schema.json", `{"v":1,"type":"command","command_id":"c","action":"create","spec":{"agent_type":"claude","mcp_servers":[{"name":"a","url":"HTTP://h/mcp"}]}}`},
		{"command.schema.json", `{"v":1,"type":"command","command_id":"c","action":"create","spec":{"agent_type":"claude","mcp_servers":[{"name":"a","url":"http://h","env":{"A":"1"}}]}}`},
		{"command.schema.json", `{"v":1,"type":"command","command_id":"c","action":"create","spec":{"agent_type":"claude","mcp_servers":[{"name":"a","command":"x","headers":{"A":"1"}}]}}`},
		{"command.schema.json", `{"v":1,"type":"command","command_id":"c","action":"create","spec":{"agent_type":"claude","mcp_servers":[{"name":"a","command":"x","type":"stdio"}]}}`},
		{"command.schema.json", `{"v":1,"type":"command","command_id":"c","action":"create","spec":{"agent_type":"claude","mcp_servers":[{"name":"a","command":"x","env":{"A-B":"1"}}]}}`},
		{"reply.schema.json", `{"v":1,"type":"reply","command_id":"c","action":"list","ok":true,"error":{"code":"NOT_FOUND","message":"m","retryable":false},"timestamp":"2026-01-01T00:00:00Z"}`},
		{"task.schema.json", `{"v":1,"type":"task","request_id":"r","prompt":"p","git":{"branch":"b"}}`},
		{"task.schema.json", `{"v":1,"type":"task","request_id":"r","prompt":"p","git":{"remote":"git@h:o/r.git"}}`},
		{"command.schema.json", `{"v":1,"type":"command","command_id":"c","action":"create","spec":{"agent_type":"claude","git":{"remote":"https://u:p@h/o/r"}}}`},
		{"output.schema.json", `{"v":1,"type":"output","request_id":"r","worker_id":"w","status":"complete","usage":{"input":0,"output":0,"cache_read":0,"cache_creation":0},"context_tokens":0,"cost_usd":0,"duration_ms":0,"timestamp":"2026-01-01T00:00:00Z","git":{"remote":"https://h/o/r","branch":"b","base":"main","changed":false,"insertions":0,"deletions":0,"pushed":false,"head_commit":"xyz"}}`},
		{"stop_output.schema.json", `{"status":"blocked"}`},
		{"stop_output.schema.json", `{"status":"complete","result":"text"}`},
		{"progress_report.schema.json", `{"step":"s","progress_pct":150}`},
	}
	for i, r := range refused {
		t.Run(fmt.Sprintf("%s/%d", r.schema, i), func(t *testing.T) {
			if _, err := decoders[r.schema]([]byte(r.doc)); err == nil {
				t.Fatalf("the Go decoder accepts %s", r.doc)
			}
			if err := validate(schemas[r.schema], []byte(r.doc)); err == nil {
				t.Fatalf("the schema accepts %s", r.doc)
			}
		})
	}
}

// Every example in PROTOCOL.md is a fenced block whose info string names
// its schema (```json task); each must pass its schema and the Go decoder.
func TestProtocolDocExamples(t *testing.T) {
	schemas := compileSchemas(t)
	f, err := os.Open("PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		in     bool
		schema string
		buf    strings.Builder
		line   int
		start  int
		seen   = map[string]int{}
	)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line++
		text := sc.Text()
		switch {
		case !in && strings.HasPrefix(text, "```json "):
			in, schema, start = true, strings.TrimSpace(strings.TrimPrefix(text, "```json ")), line
			buf.Reset()
		case in && text == "```":
			in = false
			name := schema + ".schema.json"
			s, ok := schemas[name]
			if !ok {
				t.Errorf("PROTOCOL.md:%d: example names unknown schema %q", start, schema)
				continue
			}
			seen[name]++
			doc := []byte(buf.String())
			if err := validate(s, doc); err != nil {
				t.Errorf("PROTOCOL.md:%d: example fails %s: %v", start, name, err)
			}
			if dec := decoders[name]; dec != nil {
				if _, err := dec(doc); err != nil {
					t.Errorf("PROTOCOL.md:%d: the Go decoder refuses the example: %v", start, err)
				}
			}
		case in:
			buf.WriteString(text + "\n")
		}
	}
	for name := range decoders {
		if seen[name] == 0 {
			t.Errorf("PROTOCOL.md has no example of %s", name)
		}
	}
}

// The package itself imports the standard library only, so that any
// service can import it without a Redis or Docker client.
func TestStandardLibraryOnly(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range strings.Fields(string(out)) {
		if p != "github.com/agentvisor/agentvisor/protocol" {
			t.Errorf("protocol imports %s, which is not in the standard library", p)
		}
	}
}
