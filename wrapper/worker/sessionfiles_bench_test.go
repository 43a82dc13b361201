package worker

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/testkit"
	"github.com/agentvisor/agentvisor/wrapper/internal/rdb"
)

// transcriptCorpus is text to fill a synthetic transcript with: the
// repository's own Go sources (what Read tool results carry) and the
// sentences of its Markdown (what prompts and answers read like).
type transcriptCorpus struct {
	files     []corpusFile
	sentences []string
}

type corpusFile struct {
	path string
	text string
}

func loadTranscriptCorpus(b *testing.B) *transcriptCorpus {
	b.Helper()
	c := &transcriptCorpus{}
	root := testkit.Root()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".go":
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			c.files = append(c.files, corpusFile{path: "/home/worker/workspace/" + rel, text: string(data)})
		case ".md":
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, s := range strings.SplitAfter(strings.Join(strings.Fields(string(data)), " "), ". ") {
				if len(s) > 20 {
					c.sentences = append(c.sentences, s)
				}
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	if len(c.files) < 50 || len(c.sentences) < 500 {
		b.Fatalf("corpus too small: %d files, %d sentences", len(c.files), len(c.sentences))
	}
	return c
}

// transcript writes Claude-transcript-like JSONL of at least size bytes:
// turns of a user prompt, assistant text, tool uses (Read, Bash, Edit,
// Grep) and their results, each line with the uuids, timestamps, usage
// and metadata Claude Code's transcripts carry. The text comes from the
// corpus, chosen by a seeded generator: no two turns alike, the same file
// for the same seed.
func (c *transcriptCorpus) transcript(seed uint64, sessionID string, size int) []byte {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	uuid := func() string {
		return fmt.Sprintf("%08x-%04x-4%03x-%04x-%012x", rng.Uint32(), rng.Uint32()&0xffff, rng.Uint32()&0xfff, 0x8000|rng.Uint32()&0x3fff, rng.Uint64()&0xffffffffffff)
	}
	id := func(prefix string) string {
		const letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
		b := []byte(prefix)
		for range 24 {
			b = append(b, letters[rng.IntN(len(letters))])
		}
		return string(b)
	}
	prose := func(n int) string {
		var s []string
		for range n {
			s = append(s, c.sentences[rng.IntN(len(c.sentences))])
		}
		return strings.Join(s, "")
	}
	at := time.Date(2025, 11, 3, 9, 0, 0, 0, time.UTC)
	parent := any(nil)
	line := func(typ string, message any, extra map[string]any) {
		u := uuid()
		at = at.Add(time.Duration(200+rng.IntN(20000)) * time.Millisecond)
		l := map[string]any{"parentUuid": parent, "isSidechain": false, "userType": "external", "cwd": "/home/worker/workspace",
			"sessionId": sessionID, "version": "2.1.197", "gitBranch": "main", "type": typ, "message": message,
			"uuid": u, "timestamp": at.Format("2006-01-02T15:04:05.000Z")}
		for k, v := range extra {
			l[k] = v
		}
		if err := enc.Encode(l); err != nil {
			panic(err)
		}
		parent = u
	}
	usage := func() map[string]any {
		created := rng.IntN(4000)
		return map[string]any{"input_tokens": 1 + rng.IntN(20), "cache_creation_input_tokens": created,
			"cache_read_input_tokens": 9000 + rng.IntN(120000), "output_tokens": 20 + rng.IntN(2000), "service_tier": "standard",
			"cache_creation": map[string]any{"ephemeral_5m_input_tokens": created, "ephemeral_1h_input_tokens": 0}}
	}
	assistant := func(content ...any) {
		line("assistant", map[string]any{"id": id("msg_01"), "type": "message", "role": "assistant", "model": "claude-sonnet-4-5-20250929",
			"content": content, "stop_reason": nil, "stop_sequence": nil, "usage": usage()}, map[string]any{"requestId": id("req_011C")})
	}
	toolResult := func(useID, content string, result any) {
		line("user", map[string]any{"role": "user", "content": []any{map[string]any{"tool_use_id": useID, "type": "tool_result", "content": content}}},
			map[string]any{"toolUseResult": result})
	}
	for buf.Len() < size {
		line("user", map[string]any{"role": "user", "content": prose(1 + rng.IntN(4))}, nil)
		for range 1 + rng.IntN(5) {
			assistant(map[string]any{"type": "text", "text": prose(1 + rng.IntN(3))})
			useID := id("toolu_01")
			f := c.files[rng.IntN(len(c.files))]
			lines := strings.Split(f.text, "\n")
			switch rng.IntN(4) {
			case 0: // Read: the numbered lines, and the file again in toolUseResult
				from := rng.IntN(len(lines))
				to := min(len(lines), from+20+rng.IntN(300))
				var numbered strings.Builder
				for i := from; i < to; i++ {
					fmt.Fprintf(&numbered, "%6d\t%s\n", i+1, lines[i])
				}
				assistant(map[string]any{"type": "tool_use", "id": useID, "name": "Read", "input": map[string]any{"file_path": f.path, "offset": from + 1, "limit": to - from}})
				toolResult(useID, numbered.String(), map[string]any{"type": "text", "file": map[string]any{"filePath": f.path,
					"content": strings.Join(lines[from:to], "\n"), "numLines": to - from, "startLine": from + 1, "totalLines": len(lines)}})
			case 1: // Bash: a command and its output
				out := strings.Join(lines[:min(len(lines), 5+rng.IntN(60))], "\n")
				cmd := fmt.Sprintf("cd /home/worker/workspace && go test -run Test%s ./%s/", id("")[:8], filepath.Base(filepath.Dir(f.path)))
				assistant(map[string]any{"type": "tool_use", "id": useID, "name": "Bash", "input": map[string]any{"command": cmd, "description": prose(1)}})
				toolResult(useID, out, map[string]any{"stdout": out, "stderr": "", "interrupted": false, "isImage": false})
			case 2: // Edit: the old and new strings, and a patch
				i := rng.IntN(len(lines))
				old := strings.Join(lines[i:min(len(lines), i+1+rng.IntN(12))], "\n")
				repl := old + "\n\t// " + prose(1)
				assistant(map[string]any{"type": "tool_use", "id": useID, "name": "Edit", "input": map[string]any{"file_path": f.path, "old_string": old, "new_string": repl}})
				toolResult(useID, "The file "+f.path+" has been updated.", map[string]any{"filePath": f.path, "oldString": old, "newString": repl,
					"originalFile": f.text, "structuredPatch": []any{map[string]any{"oldStart": i + 1, "lines": strings.Split(repl, "\n")}}})
			default: // Grep: matching paths
				var paths []string
				for range 1 + rng.IntN(30) {
					paths = append(paths, c.files[rng.IntN(len(c.files))].path)
				}
				assistant(map[string]any{"type": "tool_use", "id": useID, "name": "Grep", "input": map[string]any{"pattern": strings.Fields(prose(1))[0], "output_mode": "files_with_matches"}})
				toolResult(useID, strings.Join(paths, "\n"), map[string]any{"mode": "files_with_matches", "filenames": paths, "numFiles": len(paths)})
			}
		}
		assistant(map[string]any{"type": "text", "text": prose(2 + rng.IntN(6))})
	}
	return buf.Bytes()
}

// BenchmarkSessionStore: SessionFiles.Save and Restore of a Claude
// session of about 1 MB and 16 MB of transcript against a real Redis,
// in ms per MB of the uncompressed files, and the stored blob's size as
// a fraction of them. Baselines of the same run: the same bytes read
// from the file and SET as they are (save), GET and written to a file
// (restore), and gzip of the bare files (the size).
func BenchmarkSessionStore(b *testing.B) {
	r, rc := testkit.StartRedisClient(b)
	keys := protocol.Keys{}
	store, err := rdb.Open(r.URL(), "", keys)
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	// A 16 MB blob takes longer than the default per-call timeout allows
	// on a loaded machine; the wrapper's own timeout is not measured here.
	store.Timeout = time.Minute
	corpus := loadTranscriptCorpus(b)
	ctx := context.Background()
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	const rel = ".claude/projects/-home-worker-workspace"
	for _, size := range []struct {
		name   string
		bytes  int
		rounds int
	}{{"1MB", 1 << 20, 15}, {"16MB", 16 << 20, 5}} {
		sessionID := fmt.Sprintf("5b716dd0-044f-4748-812b-%012d", size.bytes)
		data := corpus.transcript(uint64(size.bytes), sessionID, size.bytes)
		mb := float64(len(data)) / (1 << 20)
		project := "bench-" + size.name
		home := b.TempDir()
		path := filepath.Join(home, rel, sessionID+".jsonl")
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			b.Fatal(err)
		}
		// No cap: the size is measured whatever it is (the default cap,
		// SESSION_STORE_MAX_BYTES, is compared below).
		files := &SessionFiles{Home: home, Dirs: agentSessionDirs[protocol.AgentClaude], Store: store, TTL: time.Hour, Log: log}
		var save, restore, bareSave, bareRestore []float64
		for i := range size.rounds {
			t0 := time.Now()
			if err := files.Save(ctx, protocol.AgentClaude, project, sessionID); err != nil {
				b.Fatal(err)
			}
			save = append(save, msPerMB(time.Since(t0), mb))

			to := &SessionFiles{Home: filepath.Join(b.TempDir(), fmt.Sprint(i)), Dirs: agentSessionDirs[protocol.AgentClaude], Store: store, Log: log}
			t0 = time.Now()
			if ok, err := to.Restore(ctx, protocol.AgentClaude, project, sessionID); err != nil || !ok {
				b.Fatalf("restore: %v %v", ok, err)
			}
			restore = append(restore, msPerMB(time.Since(t0), mb))
			if got, err := os.ReadFile(filepath.Join(to.Home, rel, sessionID+".jsonl")); err != nil || !bytes.Equal(got, data) {
				b.Fatalf("the restored transcript differs (%d bytes, %v)", len(got), err)
			}

			// The same bytes moved bare: read and SET, GET and written.
			bareKey := "bare:" + project
			t0 = time.Now()
			raw, err := os.ReadFile(path)
			if err != nil {
				b.Fatal(err)
			}
			if err := rc.Set(ctx, bareKey, raw, time.Hour).Err(); err != nil {
				b.Fatal(err)
			}
			bareSave = append(bareSave, msPerMB(time.Since(t0), mb))
			t0 = time.Now()
			got, err := rc.Get(ctx, bareKey).Bytes()
			if err != nil {
				b.Fatal(err)
			}
			out := filepath.Join(b.TempDir(), "bare.jsonl")
			if err := os.WriteFile(out, got, 0o600); err != nil {
				b.Fatal(err)
			}
			bareRestore = append(bareRestore, msPerMB(time.Since(t0), mb))
		}
		blob, err := rc.Get(ctx, keys.SessionFiles(protocol.AgentClaude, project)).Bytes()
		if err != nil {
			b.Fatal(err)
		}
		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		zw.Write(data)
		zw.Close()
		b.ReportMetric(mb, "session-"+size.name+"-raw-MB")
		b.ReportMetric(median(save), "session-save-"+size.name+"-ms-per-MB")
		b.ReportMetric(median(bareSave), "session-bare-set-"+size.name+"-ms-per-MB")
		b.ReportMetric(median(restore), "session-restore-"+size.name+"-ms-per-MB")
		b.ReportMetric(median(bareRestore), "session-bare-get-"+size.name+"-ms-per-MB")
		b.ReportMetric(float64(len(blob))/float64(len(data)), "session-"+size.name+"-stored-fraction")
		b.ReportMetric(float64(gz.Len())/float64(len(data)), "session-"+size.name+"-gzip-fraction")
		b.ReportMetric(float64(len(blob))/(1<<20), "session-"+size.name+"-stored-MB")
	}
}

func msPerMB(d time.Duration, mb float64) float64 { return float64(d.Microseconds()) / 1000 / mb }

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
