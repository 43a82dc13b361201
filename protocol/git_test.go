package protocol

import (
	"errors"
	"strings"
	"testing"
)

func TestDecodeTaskGitErrorsNameTheField(t *testing.T) {
	task := func(git string) string {
		return `{"v":1,"type":"task","request_id":"r","prompt":"p","git":` + git + `}`
	}
	tests := []struct{ name, git, field string }{
		{"no remote", `{"branch":"b"}`, "git.remote"},
		{"ssh remote", `{"remote":"git@github.com:o/r.git"}`, "git.remote"},
		{"file remote", `{"remote":"file:///srv/r.git"}`, "git.remote"},
		{"credential in the URL", `{"remote":"https://bot:tok@git.example.com/o/r.git"}`, "git.remote"},
		{"no path", `{"remote":"https://git.example.com/"}`, "git.remote"},
		{"query", `{"remote":"https://git.example.com/o/r.git?x=1"}`, "git.remote"},
		{"branch with ..", `{"remote":"https://h/o/r","branch":"a..b"}`, "git.branch"},
		{"branch with a space", `{"remote":"https://h/o/r","branch":"a b"}`, "git.branch"},
		{"branch with a colon", `{"remote":"https://h/o/r","branch":"a:b"}`, "git.branch"},
		{"branch starting with -", `{"remote":"https://h/o/r","branch":"-f"}`, "git.branch"},
		{"branch ending .lock", `{"remote":"https://h/o/r","branch":"x.lock"}`, "git.branch"},
		{"branch a full ref", `{"remote":"https://h/o/r","branch":"refs/heads/x"}`, "git.branch"},
		{"branch HEAD", `{"remote":"https://h/o/r","branch":"HEAD"}`, "git.branch"},
		{"base with @{", `{"remote":"https://h/o/r","base":"main@{1}"}`, "git.base"},
		{"email with <", `{"remote":"https://h/o/r","author_email":"<a@b>"}`, "git.author_email"},
		{"message of two lines", `{"remote":"https://h/o/r","message":"a\nb"}`, "git.message"},
		{"unknown field", `{"remote":"https://h/o/r","force":true}`, "force"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeTask([]byte(task(tt.git)))
			var de *DecodeError
			if !errors.As(err, &de) || de.Field != tt.field {
				t.Fatalf("err = %v, want a *DecodeError naming %s", err, tt.field)
			}
			if err := validate(compileSchemas(t)["task.schema.json"], []byte(task(tt.git))); err == nil && tt.field != "git.base" && tt.field != "git.message" {
				t.Errorf("the schema accepts %s", tt.git)
			}
		})
	}
	for _, ok := range []string{`{"remote":"https://git.example.com/o/r.git","base":"release/1.2","branch":"fix/x-1"}`,
		`{"remote":"http://127.0.0.1:8080/r.git","base":"0123456789abcdef0123456789abcdef01234567"}`} {
		if _, err := DecodeTask([]byte(task(ok))); err != nil {
			t.Errorf("%s refused: %v", ok, err)
		}
	}
}

func TestDefaultGitBranchIsStableAcrossRetriesAndFollowUps(t *testing.T) {
	g := &Git{Remote: "https://h/o/r"}
	first := Task{RequestID: "r-1", TaskID: "issue 17/ä", Prompt: "p", Git: g}
	followUp := Task{RequestID: "r-2", TaskID: "issue 17/ä", Answers: "r-1", Prompt: "p", Git: g}
	if a, b := first.EffectiveGit(nil).Branch, followUp.EffectiveGit(nil).Branch; a != b || a != "agentvisor/issue-17" {
		t.Fatalf("branches %q and %q, want one agentvisor/issue-17", a, b)
	}
	if err := CheckGitRef(first.EffectiveGit(nil).Branch); err != nil {
		t.Fatal(err)
	}
	// Without a task_id: the answered run's, else the request's.
	answer := Task{RequestID: "r-3", Answers: "r-1", Prompt: "p"}
	if got := answer.EffectiveGit(g).Branch; got != "agentvisor/r-1" {
		t.Errorf("answer's branch %q", got)
	}
	if got := (Task{RequestID: "..lock"}).DefaultGitBranch(); CheckGitRef(got) != nil {
		t.Errorf("DefaultGitBranch %q is no ref", got)
	}
	// A task's own git comes before the worker's default; a named branch stays.
	own := Task{RequestID: "r", Git: &Git{Remote: "https://h/o/other", Branch: "mine"}}
	if got := own.EffectiveGit(g); got.Remote != "https://h/o/other" || got.Branch != "mine" {
		t.Errorf("own git %+v", got)
	}
	if (Task{RequestID: "r"}).EffectiveGit(nil) != nil {
		t.Error("a task without git, on a worker without a default, has git")
	}
}

func TestGitDefaultEnvRoundTrip(t *testing.T) {
	g := &Git{Remote: "https://h/o/r", Base: "main", AllowForcePush: true}
	v, err := EncodeGitDefault(g)
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeGitDefault(v)
	if err != nil || *back != *g {
		t.Fatalf("%+v %v", back, err)
	}
	if _, err := DecodeGitDefault(`{"remote":"ftp://h/r"}`); err == nil || !strings.Contains(err.Error(), EnvGitDefault) {
		t.Errorf("a bad default: %v", err)
	}
	if g, err := DecodeGitDefault(""); g != nil || err != nil {
		t.Errorf("empty: %v %v", g, err)
	}
}
