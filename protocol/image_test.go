package protocol

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestStripJSONC(t *testing.T) {
	in := `{
  // a comment, "with a quote
  "image": "debian", /* a block */ "url": "http://x//y", // after a comma
  "list": [1, 2,],
  "s": "a /* not */ comment, }",
}`
	var got map[string]any
	if err := json.Unmarshal(StripJSONC([]byte(in)), &got); err != nil {
		t.Fatalf("%v\n%s", err, StripJSONC([]byte(in)))
	}
	if got["url"] != "http://x//y" || got["s"] != "a /* not */ comment, }" || len(got["list"].([]any)) != 2 {
		t.Fatalf("got %v", got)
	}
}

func TestParseDevcontainer(t *testing.T) {
	dc, err := ParseDevcontainer(`{
		"name": "shop", // ignored
		"build": {"dockerfile": "Dockerfile", "args": {"V": "1"}, "target": "dev"},
		"containerEnv": {"TOOL_HOME": "/opt/tool"},
		"remoteUser": "root",
		"onCreateCommand": ["echo", "one"],
		"postCreateCommand": {"b": "echo three", "a": "echo two"},
		"customizations": {"vscode": {}},
	}`)
	if err != nil {
		t.Fatal(err)
	}
	if dc.Build.Dockerfile != "Dockerfile" || dc.Build.Args["V"] != "1" || dc.Build.Target != "dev" || dc.ContainerEnv["TOOL_HOME"] != "/opt/tool" || dc.RemoteUser != "root" {
		t.Fatalf("got %+v", dc)
	}
	want := []DevCommand{{Args: []string{"echo", "one"}}, {Shell: "echo two"}, {Shell: "echo three"}}
	if len(dc.Commands) != len(want) {
		t.Fatalf("commands %+v, want %+v", dc.Commands, want)
	}
	for i := range want {
		if dc.Commands[i].Shell != want[i].Shell || strings.Join(dc.Commands[i].Args, " ") != strings.Join(want[i].Args, " ") {
			t.Errorf("command %d: %+v, want %+v", i, dc.Commands[i], want[i])
		}
	}
	for _, tc := range []struct{ name, text, want string }{
		{"features", `{"image": "x", "features": {"ghcr.io/devcontainers/features/go:1": {}}}`, "features is not honoured"},
		{"host command", `{"image": "x", "initializeCommand": "curl evil"}`, "initializeCommand is not honoured"},
		{"mounts", `{"image": "x", "mounts": ["source=/,target=/host,type=bind"]}`, "mounts is not honoured"},
		{"neither", `{"name": "x"}`, "want one of image or build.dockerfile"},
		{"both", `{"image": "x", "build": {"dockerfile": "D"}}`, "want one of image or build.dockerfile"},
		{"reserved env", `{"image": "x", "containerEnv": {"REDIS_URL": "redis://evil"}}`, "REDIS_URL is set by the runtime"},
		{"not json", `{"image": `, "not a JSON object"},
		{"bad command", `{"image": "x", "postCreateCommand": 3}`, "postCreateCommand"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParseDevcontainer(tc.text); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

func TestProjectImageValidate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		image ProjectImage
		want  string // "" for valid
	}{
		{"base", ProjectImage{Base: "debian:bookworm"}, ""},
		{"dockerfile", ProjectImage{Dockerfile: "FROM debian\n", BuildArgs: map[string]string{"V": "1"}}, ""},
		{"devcontainer image", ProjectImage{Devcontainer: `{"image": "debian"}`}, ""},
		{"devcontainer build", ProjectImage{Devcontainer: `{"build": {"dockerfile": "Dockerfile"}}`, Dockerfile: "FROM debian\n"}, ""},
		{"none", ProjectImage{}, "exactly one of"},
		{"two", ProjectImage{Base: "debian", Dockerfile: "FROM debian\n"}, "exactly one of"},
		{"devcontainer without its dockerfile", ProjectImage{Devcontainer: `{"build": {"dockerfile": "Dockerfile"}}`}, "spec.image.dockerfile"},
		{"devcontainer image and a dockerfile", ProjectImage{Devcontainer: `{"image": "debian"}`, Dockerfile: "FROM x\n"}, "names an image"},
		{"bad base", ProjectImage{Base: "--privileged"}, "not an image reference"},
		{"too large", ProjectImage{Dockerfile: strings.Repeat("#", MaxProjectFileBytes+1)}, "at most"},
		{"bad arg", ProjectImage{Dockerfile: "FROM x\n", BuildArgs: map[string]string{"a b": "1"}}, "build argument"},
		{"bad devcontainer", ProjectImage{Devcontainer: `{"image": "x", "runArgs": ["--privileged"]}`}, "runArgs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := tc.image
			err := WorkerSpec{AgentType: AgentClaude, Image: &img}.Validate()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

func TestRecipeProjectLine(t *testing.T) {
	r := Recipe{Agent: AgentClaude, BaseImage: "sha256:b"}
	plain, _ := r.Hash()
	text, _ := r.Canonical()
	if strings.Contains(text, "project=") {
		t.Fatalf("a recipe without a project has a project line:\n%s", text)
	}
	r.Project = "abc"
	withProject, _ := r.Hash()
	text, _ = r.Canonical()
	if !strings.HasSuffix(text, "capabilities=\nproject=abc\n") || withProject == plain {
		t.Fatalf("canonical %q, hash %s (plain %s)", text, withProject, plain)
	}
	r.Project = "a\nb"
	if _, err := r.Canonical(); err == nil {
		t.Fatal("a project with a line break accepted")
	}
}
