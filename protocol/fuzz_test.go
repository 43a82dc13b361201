package protocol

import (
	"encoding/json"
	"testing"
)

// Every decoder of outside input is fuzzed: it must never panic, and what
// it accepts must survive an encode/decode round trip unchanged.

func seedDecoder(f *testing.F, schema string) {
	for _, d := range samples()[schema] {
		b, _ := d.Encode()
		f.Add(b)
	}
	f.Add([]byte(`{"v":1,"type":"` + schema + `"}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"v":1e400}`))
}

func fuzzRoundTrip[T encoder](f *testing.F, schema string, dec func([]byte) (T, error)) {
	seedDecoder(f, schema)
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := dec(data)
		if err != nil {
			if _, ok := err.(*DecodeError); !ok {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		b, err := v.Encode()
		if err != nil {
			t.Fatalf("accepted document does not encode: %v", err)
		}
		v2, err := dec(b)
		if err != nil {
			t.Fatalf("re-encoded document refused: %v\n%s", err, b)
		}
		b2, _ := v2.Encode()
		if string(b) != string(b2) {
			t.Fatalf("round trip changed the document:\n%s\n%s", b, b2)
		}
	})
}

func FuzzDecodeTask(f *testing.F) {
	f.Add([]byte(`{"v":1,"type":"task","request_id":"r","prompt":"p","metadata":{"a":[1,{"b":null}]}}`))
	fuzzRoundTrip(f, "task.schema.json", DecodeTask)
}

func FuzzDecodeOutput(f *testing.F) { fuzzRoundTrip(f, "output.schema.json", DecodeOutput) }

func FuzzDecodeCancel(f *testing.F) { fuzzRoundTrip(f, "cancel.schema.json", DecodeCancel) }

func FuzzDecodeMessage(f *testing.F) { fuzzRoundTrip(f, "message.schema.json", DecodeMessage) }

func FuzzDecodePermissionReply(f *testing.F) {
	fuzzRoundTrip(f, "permission_reply.schema.json", DecodePermissionReply)
}

func FuzzDecodeProgress(f *testing.F) { fuzzRoundTrip(f, "progress.schema.json", DecodeProgress) }

func FuzzDecodeLifecycle(f *testing.F) { fuzzRoundTrip(f, "lifecycle.schema.json", DecodeLifecycle) }

func FuzzDecodeHeartbeat(f *testing.F) { fuzzRoundTrip(f, "heartbeat.schema.json", DecodeHeartbeat) }

func FuzzDecodeCommand(f *testing.F) { fuzzRoundTrip(f, "command.schema.json", DecodeCommand) }

func FuzzDecodeReply(f *testing.F) { fuzzRoundTrip(f, "reply.schema.json", DecodeReply) }

func FuzzDecodeControl(f *testing.F) { fuzzRoundTrip(f, "control.schema.json", DecodeControl) }

func FuzzDecodeProgressReport(f *testing.F) {
	f.Add([]byte(`{"step":"Running tests","progress_pct":50,"output":"ok"}`))
	f.Add([]byte(`{"step":""}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := DecodeProgressReport(data)
		if err != nil {
			return
		}
		if r.Step == "" || (r.ProgressPct != nil && (*r.ProgressPct < 0 || *r.ProgressPct > 100)) {
			t.Fatalf("accepted an invalid report %+v", r)
		}
	})
}

func FuzzFindStopOutput(f *testing.F) {
	f.Add("All done.\n```json\n{\"status\": \"complete\", \"result\": {\"pr\": 42}}\n```")
	f.Add(`{"status":"blocked","question":"q"}{"status":"x"}{`)
	f.Add(`{{{{"status":"failed"}}}}`)
	f.Fuzz(func(t *testing.T, text string) {
		s, ok := FindStopOutput(text)
		if !ok {
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("found an invalid stop output %+v: %v", s, err)
		}
		b, _ := json.Marshal(s)
		if _, err := DecodeStopOutput(b); err != nil {
			t.Fatalf("found stop output does not decode: %v", err)
		}
	})
}

func FuzzParseAllowedCommands(f *testing.F) {
	f.Add("project.get,engineering.*", "engineering.deploy")
	f.Add(`["*"]`, "a.b")
	f.Add("eng*", "eng")
	f.Fuzz(func(t *testing.T, env, command string) {
		a, err := ParseAllowedCommandsEnv(env)
		if err != nil {
			if a.Allows(command) {
				t.Fatal("a refused pattern list allows something")
			}
			return
		}
		allowed := a.Allows(command)
		if allowed && !commandRe.MatchString(command) {
			t.Fatalf("malformed command %q allowed", command)
		}
		var zero AllowedCommands
		if zero.Allows(command) {
			t.Fatal("the zero value allows something")
		}
	})
}
