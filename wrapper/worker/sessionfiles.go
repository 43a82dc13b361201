package worker

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentvisor/agentvisor/protocol"
)

// SessionBlobs is where SessionFiles keeps a project's session files: one
// blob per agent type and project (Redis: Keys.SessionFiles, under the
// worker's own ACL).
type SessionBlobs interface {
	SaveSessionFiles(ctx context.Context, agent protocol.AgentType, project string, blob []byte, ttl time.Duration) error
	SessionFiles(ctx context.Context, agent protocol.AgentType, project string) ([]byte, error)
}

// SessionFiles saves what an agent needs to resume a session (its files
// under the agent's home whose name starts with the session id: Claude's
// transcript ~/.claude/projects/<dir>/<id>.jsonl, Droid's
// ~/.factory/sessions/.../<id>.jsonl and .settings.json) to a store every
// host reaches, after each task, and restores them before a resume when
// this container has none (a worker woken or replaced on another host, or
// with a new volume). The blob is gzip of a JSON document, at most
// MaxBytes (a larger session is not stored, and logged), kept for TTL.
type SessionFiles struct {
	Home     string   // the agent's home
	Dirs     []string // where under Home the agent keeps sessions
	Store    SessionBlobs
	MaxBytes int
	TTL      time.Duration
	Log      *slog.Logger
}

// agentSessionDirs are where each agent keeps a session's files, under
// its home: files whose names hold the session id (Claude's and Qwen
// Code's <id>.jsonl, Droid's <id>.jsonl and .settings.json, Codex's
// rollout-<time>-<thread id>.jsonl). OpenCode keeps a session in records
// spread over its storage (and a database in later versions), which
// file names do not tie to the session: it has no session store, its
// sessions stay in the project volume, as an ACP agent's do.
var agentSessionDirs = map[protocol.AgentType][]string{
	protocol.AgentClaude: {".claude/projects"},
	protocol.AgentDroid:  {".factory/sessions"},
	protocol.AgentCodex:  {".codex/sessions"},
	protocol.AgentQwen:   {".qwen"},
}

// sessionBlob is the stored document.
type sessionBlob struct {
	SessionID string        `json:"session_id"`
	Files     []sessionFile `json:"files"`
}

// sessionFile is one file: its text as a JSON string when it is UTF-8
// (a transcript: gzip compresses it well), else its bytes (base64, which
// compresses badly).
type sessionFile struct {
	Path string `json:"path"` // relative to the agent's home
	Text string `json:"text,omitempty"`
	Data []byte `json:"data,omitempty"`
}

func newSessionFile(rel string, data []byte) sessionFile {
	if utf8.Valid(data) {
		return sessionFile{Path: rel, Text: string(data)}
	}
	return sessionFile{Path: rel, Data: data}
}

func (f sessionFile) bytes() []byte {
	if f.Data != nil {
		return f.Data
	}
	return []byte(f.Text)
}

// files returns the paths (relative to Home) of the session's files.
func (s *SessionFiles) files(sessionID string) []string {
	var out []string
	for _, dir := range s.Dirs {
		root := filepath.Join(s.Home, dir)
		_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.Contains(d.Name(), sessionID) {
				return nil
			}
			if rel, err := filepath.Rel(s.Home, path); err == nil {
				out = append(out, rel)
			}
			return nil
		})
	}
	return out
}

// Save stores the session's files as the project's (nothing when it has
// none here, or when they are over MaxBytes compressed).
func (s *SessionFiles) Save(ctx context.Context, agent protocol.AgentType, project, sessionID string) error {
	if sessionID == "" {
		return nil
	}
	doc := sessionBlob{SessionID: sessionID}
	for _, rel := range s.files(sessionID) {
		data, err := os.ReadFile(filepath.Join(s.Home, rel))
		if err != nil {
			return err
		}
		doc.Files = append(doc.Files, newSessionFile(rel, data))
	}
	if len(doc.Files) == 0 {
		return nil
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if err := json.NewEncoder(zw).Encode(doc); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	if s.MaxBytes > 0 && buf.Len() > s.MaxBytes {
		return fmt.Errorf("session %s is %d bytes compressed, over SESSION_STORE_MAX_BYTES=%d: not stored", sessionID, buf.Len(), s.MaxBytes)
	}
	return s.Store.SaveSessionFiles(ctx, agent, project, buf.Bytes(), s.TTL)
}

// errNoSessionFiles: the store has no files of the session asked for.
var errNoSessionFiles = errors.New("the session store has no files of this session")

// Restore writes the session's files from the store into Home when this
// container has none of them; it reports whether it wrote any.
func (s *SessionFiles) Restore(ctx context.Context, agent protocol.AgentType, project, sessionID string) (bool, error) {
	if sessionID == "" || len(s.files(sessionID)) > 0 {
		return false, nil
	}
	blob, err := s.Store.SessionFiles(ctx, agent, project)
	if err != nil || blob == nil {
		if err == nil {
			err = errNoSessionFiles
		}
		return false, err
	}
	zr, err := gzip.NewReader(bytes.NewReader(blob))
	if err != nil {
		return false, err
	}
	var doc sessionBlob
	if err := json.NewDecoder(io.LimitReader(zr, 1<<30)).Decode(&doc); err != nil {
		return false, err
	}
	if doc.SessionID != sessionID {
		return false, errNoSessionFiles
	}
	for _, f := range doc.Files {
		path := filepath.Join(s.Home, filepath.Clean(f.Path))
		if !filepath.IsLocal(f.Path) || !strings.HasPrefix(path, filepath.Clean(s.Home)+string(filepath.Separator)) {
			return false, fmt.Errorf("session file %q is outside the agent's home", f.Path)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return false, err
		}
		if err := os.WriteFile(path, f.bytes(), 0o600); err != nil {
			return false, err
		}
	}
	return len(doc.Files) > 0, nil
}
