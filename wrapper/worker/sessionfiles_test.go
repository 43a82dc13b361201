package worker

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/testkit"
	"github.com/agentvisor/agentvisor/wrapper/agent"
	"github.com/agentvisor/agentvisor/wrapper/internal/rdb"
)

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// A project's session moves to another container through the session
// store: the worker that ran it saves its files after the task, and a
// worker with an empty home (another host, a new volume) restores them
// before it resumes the session. Nothing else of the home travels, and a
// session too large for the cap is not stored.
func TestSessionFilesMoveToAnotherHome(t *testing.T) {
	r := testkit.StartRedis(t)
	keys := protocol.Keys{}
	store := openStore(t, r.URL())
	ctx := context.Background()
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	homeA, homeB := t.TempDir(), t.TempDir()
	transcript := ".claude/projects/-home-worker-workspace/sess-1.jsonl"
	writeFile(t, filepath.Join(homeA, transcript), `{"type":"user","message":"remember 42"}`+"\n")
	writeFile(t, filepath.Join(homeA, ".claude/projects/-home-worker-workspace/other.jsonl"), "another session\n")
	writeFile(t, filepath.Join(homeA, ".claude/settings.json"), "{}")

	var clk clock
	policy := func(home string) *ProjectSessions {
		files := &SessionFiles{Home: home, Dirs: agentSessionDirs[protocol.AgentClaude], Store: store, MaxBytes: 1 << 20, TTL: time.Hour, Log: log}
		return NewProjectSessions(SessionDeps{Store: store, Now: clk.now, Log: log, AgentType: protocol.AgentClaude, WorkerID: "w1", Files: files},
			SessionConfig{})
	}
	task := protocol.Task{RequestID: "r1", ProjectID: "proj", Prompt: "remember 42"}
	a := policy(homeA)
	plan := a.Decide(ctx, task)
	if plan.ResumeID != "" {
		t.Fatalf("first task: %+v", plan)
	}
	a.Complete(ctx, task, plan, agent.Outcome{Result: &agent.Result{SessionID: "sess-1"}}, nil)
	if ttl := r.Client(t).TTL(ctx, keys.SessionFiles(protocol.AgentClaude, "proj")).Val(); ttl <= 0 || ttl > time.Hour {
		t.Fatalf("session files kept for %v, want the store's TTL", ttl)
	}

	b := policy(homeB)
	plan = b.Decide(ctx, protocol.Task{RequestID: "r2", ProjectID: "proj", Prompt: "what was it?"})
	if plan.ResumeID != "sess-1" {
		t.Fatalf("second task: %+v", plan)
	}
	got, err := os.ReadFile(filepath.Join(homeB, transcript))
	if err != nil || string(got) != `{"type":"user","message":"remember 42"}`+"\n" {
		t.Fatalf("restored transcript %q %v", got, err)
	}
	for _, rel := range []string{".claude/projects/-home-worker-workspace/other.jsonl", ".claude/settings.json"} {
		if _, err := os.Stat(filepath.Join(homeB, rel)); !os.IsNotExist(err) {
			t.Errorf("%s travelled with the session (%v)", rel, err)
		}
	}
	// Files already here are not overwritten.
	writeFile(t, filepath.Join(homeB, transcript), "newer here\n")
	if ok, err := b.d.Files.Restore(ctx, protocol.AgentClaude, "proj", "sess-1"); ok || err != nil {
		t.Fatalf("restore over files present: %v %v", ok, err)
	}
	// Another session's id finds nothing to restore.
	if ok, err := b.d.Files.Restore(ctx, protocol.AgentClaude, "proj", "sess-2"); ok || err == nil {
		t.Fatalf("restore of a session the store does not have: %v %v", ok, err)
	}
	// Over the cap: not stored, the store keeps the last one.
	big := &SessionFiles{Home: homeA, Dirs: agentSessionDirs[protocol.AgentClaude], Store: store, MaxBytes: 10, TTL: time.Hour, Log: log}
	if err := big.Save(ctx, protocol.AgentClaude, "proj", "sess-1"); err == nil {
		t.Fatal("a session over the cap was stored")
	}
}

// A stored blob cannot write outside the agent's home.
func TestSessionFilesStayInTheHome(t *testing.T) {
	store := sessionStore(t)
	ctx := context.Background()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_ = json.NewEncoder(zw).Encode(sessionBlob{SessionID: "s", Files: []sessionFile{{Path: "../escaped", Data: []byte("x")}}})
	_ = zw.Close()
	if err := store.SaveSessionFiles(ctx, protocol.AgentClaude, "p", buf.Bytes(), time.Hour); err != nil {
		t.Fatal(err)
	}
	parent := t.TempDir()
	home := filepath.Join(parent, "home")
	f := &SessionFiles{Home: home, Dirs: agentSessionDirs[protocol.AgentClaude], Store: store}
	if ok, err := f.Restore(ctx, protocol.AgentClaude, "p", "s"); ok || err == nil {
		t.Fatalf("a path out of the home was restored: %v %v", ok, err)
	}
	if _, err := os.Stat(filepath.Join(parent, "escaped")); !os.IsNotExist(err) {
		t.Fatalf("a file was written outside the home (%v)", err)
	}
}

// Files are stored as text when they are UTF-8 (gzip compresses a JSON
// string far better than base64) and as bytes otherwise; a blob of either
// kind, and one written before text existed ("data" only), restores the
// same bytes.
func TestSessionFilesTextAndBytes(t *testing.T) {
	store := sessionStore(t)
	ctx := context.Background()
	text, binary := []byte(`{"type":"user","message":"héllo"}`+"\n"), []byte{0xff, 0xfe, 0x00, 'x'}
	if f := newSessionFile("a", text); f.Text == "" || f.Data != nil {
		t.Fatalf("a UTF-8 file: %+v", f)
	}
	if f := newSessionFile("b", binary); f.Text != "" || !bytes.Equal(f.Data, binary) {
		t.Fatalf("a binary file: %+v", f)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_ = json.NewEncoder(zw).Encode(map[string]any{"session_id": "s", "files": []map[string]any{
		{"path": ".claude/projects/x/s.jsonl", "data": text}, {"path": ".claude/projects/x/s.bin", "data": binary}}})
	_ = zw.Close()
	if err := store.SaveSessionFiles(ctx, protocol.AgentClaude, "old", buf.Bytes(), time.Hour); err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	f := &SessionFiles{Home: home, Dirs: agentSessionDirs[protocol.AgentClaude], Store: store}
	if ok, err := f.Restore(ctx, protocol.AgentClaude, "old", "s"); !ok || err != nil {
		t.Fatalf("restore of a blob with data only: %v %v", ok, err)
	}
	for name, want := range map[string][]byte{"s.jsonl": text, "s.bin": binary} {
		if got, _ := os.ReadFile(filepath.Join(home, ".claude/projects/x", name)); !bytes.Equal(got, want) {
			t.Fatalf("%s restored as %q, want %q", name, got, want)
		}
	}
	// Saved now and restored elsewhere: the same bytes.
	if err := f.Save(ctx, protocol.AgentClaude, "new", "s"); err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	g := &SessionFiles{Home: other, Dirs: agentSessionDirs[protocol.AgentClaude], Store: store}
	if ok, err := g.Restore(ctx, protocol.AgentClaude, "new", "s"); !ok || err != nil {
		t.Fatalf("restore: %v %v", ok, err)
	}
	for name, want := range map[string][]byte{"s.jsonl": text, "s.bin": binary} {
		if got, _ := os.ReadFile(filepath.Join(other, ".claude/projects/x", name)); !bytes.Equal(got, want) {
			t.Fatalf("%s restored as %q, want %q", name, got, want)
		}
	}
}

// Each agent's session files are found where it keeps them, by the
// session id in their names: Codex's rollout-<time>-<thread id>.jsonl
// under ~/.codex/sessions/<date>/ moves to another home; OpenCode, whose
// files do not name the session, has no session store.
func TestSessionFilesOfEachAgent(t *testing.T) {
	store := sessionStore(t)
	ctx := context.Background()
	thread := "019a6f4e-2b1c-7d3e-9f00-1234567890ab"
	rollout := ".codex/sessions/2026/11/28/rollout-2026-11-28T10-00-00-" + thread + ".jsonl"
	homeA, homeB := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(homeA, rollout), `{"type":"session_meta"}`+"\n")
	writeFile(t, filepath.Join(homeA, ".codex/sessions/2026/11/28/rollout-2026-11-28T09-00-00-another.jsonl"), "another\n")
	dirs := agentSessionDirs[protocol.AgentCodex]
	a := &SessionFiles{Home: homeA, Dirs: dirs, Store: store}
	if err := a.Save(ctx, protocol.AgentCodex, "p", thread); err != nil {
		t.Fatal(err)
	}
	b := &SessionFiles{Home: homeB, Dirs: dirs, Store: store}
	if ok, err := b.Restore(ctx, protocol.AgentCodex, "p", thread); !ok || err != nil {
		t.Fatalf("restore of a Codex thread: %v %v", ok, err)
	}
	if got, err := os.ReadFile(filepath.Join(homeB, rollout)); err != nil || string(got) != `{"type":"session_meta"}`+"\n" {
		t.Fatalf("the rollout restored: %q %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(homeB, ".codex/sessions/2026/11/28/rollout-2026-11-28T09-00-00-another.jsonl")); !os.IsNotExist(err) {
		t.Fatalf("another session's file travelled too (%v)", err)
	}
	for agent, want := range map[protocol.AgentType]bool{protocol.AgentClaude: true, protocol.AgentDroid: true, protocol.AgentCodex: true,
		protocol.AgentQwen: true, protocol.AgentOpenCode: false, protocol.AgentACP: false} {
		cfg := Config{AgentType: agent, SessionStore: "redis"}
		if got := cfg.sessionFiles(store, nil) != nil; got != want {
			t.Errorf("%s: a session store %v, want %v", agent, got, want)
		}
	}
}

// sessionStore is the wrapper's Redis store on a server of the test's own.
func sessionStore(t *testing.T) *rdb.RDB {
	t.Helper()
	return openStore(t, testkit.StartRedis(t).URL())
}

// openStore opens the wrapper's Redis store at url until the test ends.
func openStore(t *testing.T, url string) *rdb.RDB {
	t.Helper()
	store, err := rdb.Open(url, "", protocol.Keys{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return store
}
