package protocol

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"unicode/utf8"
)

// Git is the repository a task works in (a task's git, or a worker
// spec's as the default of its tasks): the wrapper makes a worktree of
// Remote on Branch before the agent runs, and commits and pushes what the
// agent changed when it stops (PROTOCOL.md, "Git").
type Git struct {
	// Remote is the repository's https:// (or http://) URL, without
	// credentials: a sealed worker's gateway adds its own.
	Remote string `json:"remote"`
	// Base is the remote branch (or a full ref, or a commit) a new
	// branch starts from; empty: the remote's default branch.
	Base string `json:"base,omitempty"`
	// Branch is the branch the work goes to; empty: DefaultGitBranch of
	// the task. A branch that exists on the remote is continued from its
	// head.
	Branch string `json:"branch,omitempty"`
	// AllowForcePush lets the branch be pushed when it is not a
	// fast-forward of the remote's (the gateway refuses such a push
	// otherwise).
	AllowForcePush bool `json:"allow_force_push,omitempty"`
	// DiscardOnFailure leaves a failed or cancelled task's changes
	// unpushed; by default they are committed and pushed to the branch
	// like a complete task's, and the output says where.
	DiscardOnFailure bool `json:"discard_on_failure,omitempty"`
	// AuthorName and AuthorEmail are the author and committer of the
	// commit the wrapper makes; empty: DefaultGitAuthorName and
	// DefaultGitAuthorEmail.
	AuthorName  string `json:"author_name,omitempty"`
	AuthorEmail string `json:"author_email,omitempty"`
	// Message is the subject of that commit; empty: the task's prompt's
	// first line, cut to 72 bytes. The agent's final text is its body.
	Message string `json:"message,omitempty"`
}

// Defaults of a task's git.
const (
	DefaultGitAuthorName  = "agentvisor"
	DefaultGitAuthorEmail = "agentvisor@localhost"
	// GitBranchPrefix starts every branch the runtime names itself.
	GitBranchPrefix = "agentvisor/"
	// MaxGitPatchBytes bounds the patch an output carries; a longer one
	// is cut at a line and GitOutput.PatchTruncated set.
	MaxGitPatchBytes = 256 << 10
	// MaxGitCommits bounds the commits an output lists (the newest).
	MaxGitCommits = 100
	// MaxGitFiles bounds the files of an output's diffstat.
	MaxGitFiles = 1000
	// maxGitRefBytes bounds a branch or base.
	maxGitRefBytes = 200
	// maxGitURLBytes bounds a remote.
	maxGitURLBytes = 2048
)

// EnvGitDefault is the worker variable that carries a spec's git (JSON),
// the default of its tasks that name none.
const EnvGitDefault = "WORKER_GIT"

// EffectiveGit is the git a task works with: its own, else the worker's
// default (nil: none), with the branch filled in (DefaultGitBranch).
func (t Task) EffectiveGit(def *Git) *Git {
	g := t.Git
	if g == nil {
		g = def
	}
	if g == nil {
		return nil
	}
	out := *g
	if out.Branch == "" {
		out.Branch = t.DefaultGitBranch()
	}
	return &out
}

// DefaultGitBranch is the branch of a task whose git names none:
// GitBranchPrefix and the task's task_id, else the request it answers,
// else its request_id, made a valid ref name. Retries share the
// request_id, and follow-ups the producer's task_id (or the run they
// answer), so all of them continue one branch.
func (t Task) DefaultGitBranch() string {
	id := t.TaskID
	if id == "" {
		id = t.Answers
	}
	if id == "" {
		id = t.RequestID
	}
	return GitBranchPrefix + refSafe(id)
}

// refSafe maps what a ref name may not hold to '-'.
func refSafe(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r < 0x80 && (r == '-' || r == '_' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	out := strings.Trim(strings.ReplaceAll(b.String(), "..", "-"), ".-")
	out = strings.TrimSuffix(out, ".lock")
	if out == "" {
		return "task"
	}
	return out
}

var commitRe = regexp.MustCompile(`^[0-9a-f]{40}$`)

// validate checks every field of g, which sits at path.
func (g *Git) validate(path string) error {
	if g == nil {
		return nil
	}
	if err := CheckGitRemote(g.Remote); err != nil {
		return fieldErr(path+".remote", "%v", err)
	}
	if g.Branch != "" {
		if err := CheckGitRef(g.Branch); err != nil {
			return fieldErr(path+".branch", "%v", err)
		}
		if strings.HasPrefix(g.Branch, "refs/") {
			return fieldErr(path+".branch", "is %q: a branch name, without refs/heads/", g.Branch)
		}
	}
	if g.Base != "" && !commitRe.MatchString(g.Base) {
		if err := CheckGitRef(g.Base); err != nil {
			return fieldErr(path+".base", "%v", err)
		}
	}
	if !oneLine(g.AuthorName, 200) {
		return fieldErr(path+".author_name", "want one line of at most 200 bytes of UTF-8")
	}
	if !oneLine(g.AuthorEmail, 200) || strings.ContainsAny(g.AuthorEmail, "<> ") {
		return fieldErr(path+".author_email", "want an address of at most 200 bytes, without <, > or spaces")
	}
	if !oneLine(g.Message, 1000) {
		return fieldErr(path+".message", "want one line of at most 1000 bytes of UTF-8")
	}
	return nil
}

func oneLine(s string, max int) bool {
	return len(s) <= max && utf8.ValidString(s) && !strings.ContainsAny(s, "\n\r\x00")
}

// CheckGitRemote checks a git remote: an absolute https:// or http:// URL
// with a host and a path, no user information (a credential in a URL
// would be the agent's to read), no query or fragment.
func CheckGitRemote(remote string) error {
	if remote == "" {
		return errorf("required")
	}
	if len(remote) > maxGitURLBytes {
		return errorf("is %d bytes, at most %d", len(remote), maxGitURLBytes)
	}
	u, err := url.Parse(remote)
	switch {
	case err != nil:
		return errorf("is not a URL")
	case u.Scheme != "https" && u.Scheme != "http":
		return errorf("scheme %q: want https (or http)", u.Scheme)
	case u.User != nil:
		return errorf("holds user information: credentials are the gateway's, never in the URL")
	case u.Host == "" || strings.Trim(u.Path, "/") == "":
		return errorf("want a host and a repository path")
	case u.RawQuery != "" || u.Fragment != "" || strings.ContainsAny(remote, " \t\r\n\x00"):
		return errorf("want no query, fragment or white space")
	}
	return nil
}

// CheckGitRef checks a ref or branch name as git check-ref-format does
// (the rules a server applies too), at most 200 bytes.
func CheckGitRef(name string) error {
	switch {
	case name == "":
		return errorf("empty")
	case len(name) > maxGitRefBytes:
		return errorf("is %d bytes, at most %d", len(name), maxGitRefBytes)
	case name == "@" || name == "HEAD":
		return errorf("is %q, not a branch", name)
	case strings.HasPrefix(name, "-") || strings.HasPrefix(name, "/") || strings.HasSuffix(name, "/") ||
		strings.HasSuffix(name, ".") || strings.HasSuffix(name, ".lock"):
		return errorf("is %q: a ref may not start with - or /, nor end with /, . or .lock", name)
	case strings.Contains(name, "..") || strings.Contains(name, "//") || strings.Contains(name, "@{") || strings.Contains(name, "/."):
		return errorf("is %q: a ref may not hold .., //, @{ or a component starting with .", name)
	case strings.HasPrefix(name, "."):
		return errorf("is %q: a ref may not start with .", name)
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f || strings.ContainsRune(" ~^:?*[\\", r) {
			return errorf("is %q: a ref may not hold white space, control characters or any of ~^:?*[\\", name)
		}
	}
	if !utf8.ValidString(name) {
		return errorf("is not valid UTF-8")
	}
	return nil
}

// GitOutput is what a task's git work came to: where it went, what was
// committed and the change itself (an Output's git).
type GitOutput struct {
	Remote string `json:"remote"`
	Branch string `json:"branch"`
	// Base is the ref the branch was made from (the remote's default
	// branch when the task named none); BaseCommit its commit when the
	// task started.
	Base       string `json:"base"`
	BaseCommit string `json:"base_commit,omitempty"`
	// StartCommit is where this task started: the branch's head on the
	// remote when it existed (a follow-up), else BaseCommit.
	StartCommit string `json:"start_commit,omitempty"`
	// HeadCommit is the branch's head after the task (StartCommit when
	// it changed nothing).
	HeadCommit string `json:"head_commit,omitempty"`
	// Changed is false when the task left the branch as it found it:
	// no commit, no file changed (then Commits, Files and Patch are
	// empty and nothing was pushed).
	Changed bool `json:"changed"`
	// Commits are the commits made by the task (the agent's and the
	// wrapper's), newest first, at most MaxGitCommits.
	Commits []GitCommit `json:"commits,omitempty"`
	// Files, Insertions and Deletions are the diffstat of
	// StartCommit..HeadCommit.
	Files      []GitFileStat `json:"files,omitempty"`
	Insertions int           `json:"insertions"`
	Deletions  int           `json:"deletions"`
	// Patch is git diff StartCommit HeadCommit, at most MaxGitPatchBytes;
	// PatchTruncated says it was cut, PatchBytes is its whole size.
	Patch          string `json:"patch,omitempty"`
	PatchTruncated bool   `json:"patch_truncated,omitempty"`
	PatchBytes     int    `json:"patch_bytes,omitempty"`
	// Pushed says the branch is on the remote at HeadCommit. A failed or
	// cancelled task's work is pushed too, unless its git asked
	// discard_on_failure (then Discarded is set).
	Pushed    bool `json:"pushed"`
	Discarded bool `json:"discarded,omitempty"`
	// Uncommitted says the wrapper committed changes the agent had left
	// in the worktree (in the last of Commits).
	Uncommitted bool `json:"uncommitted,omitempty"`
	// BaseHead is the base's commit when the task ended, set when it
	// moved while the task worked (someone pushed to the base branch).
	BaseHead string `json:"base_head,omitempty"`
	// MergesCleanly says whether HeadCommit merges into the base as it
	// is at the end (BaseHead, else BaseCommit) without a conflict; set
	// when the task changed something. Conflicts names the conflicted
	// files, at most MaxGitFiles. The runtime never merges or rebases.
	MergesCleanly *bool    `json:"merges_cleanly,omitempty"`
	Conflicts     []string `json:"conflicts,omitempty"`
}

// GitCommit is one commit of a GitOutput.
type GitCommit struct {
	SHA     string `json:"sha"`
	Subject string `json:"subject"`
	Author  string `json:"author,omitempty"`
}

// GitFileStat is one file of a GitOutput's diffstat; Binary files count
// no lines.
type GitFileStat struct {
	Path       string `json:"path"`
	Insertions int    `json:"insertions"`
	Deletions  int    `json:"deletions"`
	Binary     bool   `json:"binary,omitempty"`
}

func (g *GitOutput) validate(path string) error {
	if g == nil {
		return nil
	}
	if g.Branch == "" {
		return fieldErr(path+".branch", "required")
	}
	for _, c := range []struct{ name, v string }{{"base_commit", g.BaseCommit}, {"start_commit", g.StartCommit}, {"head_commit", g.HeadCommit}, {"base_head", g.BaseHead}} {
		if c.v != "" && !commitRe.MatchString(c.v) {
			return fieldErr(path+"."+c.name, "is %q, want 40 hex digits", c.v)
		}
	}
	if g.Insertions < 0 || g.Deletions < 0 || g.PatchBytes < 0 {
		return fieldErr(path, "negative counts")
	}
	if len(g.Patch) > MaxGitPatchBytes {
		return fieldErr(path+".patch", "is %d bytes, at most %d", len(g.Patch), MaxGitPatchBytes)
	}
	return nil
}

func errorf(format string, args ...any) error {
	if len(args) == 0 {
		return errors.New(format)
	}
	return fmt.Errorf(format, args...)
}

// EncodeGitDefault is the value of EnvGitDefault for a spec's git ("" for
// none).
func EncodeGitDefault(g *Git) (string, error) {
	if g == nil {
		return "", nil
	}
	b, err := json.Marshal(g)
	return string(b), err
}

// DecodeGitDefault parses and checks the value of EnvGitDefault ("":
// none); its error names the field.
func DecodeGitDefault(v string) (*Git, error) {
	if v == "" {
		return nil, nil
	}
	var g Git
	dec := json.NewDecoder(strings.NewReader(v))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&g); err != nil {
		return nil, fmt.Errorf("%s: %w", EnvGitDefault, err)
	}
	if err := g.validate("git"); err != nil {
		return nil, fmt.Errorf("%s: %w", EnvGitDefault, err)
	}
	return &g, nil
}
