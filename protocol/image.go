package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// ProjectImage is a worker image of the project's own: the runtime layers
// the wrapper and the agent on an image the project names instead of on
// the runtime's worker-base. Exactly one of Base, Dockerfile or
// Devcontainer is set (a Devcontainer whose build names a Dockerfile
// comes with that file's text in Dockerfile). The files travel in the
// spec, as text: the consumer has the project's repository; the manager
// never fetches from it.
type ProjectImage struct {
	// Base is an image the operator allows (PROJECT_IMAGE_BASES), on the
	// host's engine already: no registry is asked.
	Base string `json:"base,omitempty"`
	// Dockerfile is the text of the project's Dockerfile. Its build has
	// an empty context and no network, and every image its FROM and
	// COPY --from lines name is one the operator allows.
	Dockerfile string `json:"dockerfile,omitempty"`
	// BuildArgs are the Dockerfile's --build-arg values (a devcontainer's
	// build.args are put over them).
	BuildArgs map[string]string `json:"build_args,omitempty"`
	// Devcontainer is the text of the project's devcontainer.json (JSON
	// with comments); ParseDevcontainer says which of its fields count.
	Devcontainer string `json:"devcontainer,omitempty"`
}

// MaxProjectFileBytes is the largest Dockerfile or devcontainer.json a
// spec may carry.
const MaxProjectFileBytes = 64 << 10

func (p *ProjectImage) validate(path string) error {
	if p == nil {
		return nil
	}
	n := 0
	for _, set := range []bool{p.Base != "", p.Dockerfile != "" && p.Devcontainer == "", p.Devcontainer != ""} {
		if set {
			n++
		}
	}
	if n != 1 {
		return fieldErr(path, "want exactly one of base, dockerfile or devcontainer (a devcontainer may come with its dockerfile)")
	}
	if p.Base != "" && !validImageRef(p.Base) {
		return fieldErr(path+".base", "is %q, not an image reference", p.Base)
	}
	for name, text := range map[string]string{"dockerfile": p.Dockerfile, "devcontainer": p.Devcontainer} {
		if len(text) > MaxProjectFileBytes {
			return fieldErr(path+"."+name, "is %d bytes, at most %d", len(text), MaxProjectFileBytes)
		}
	}
	for k := range p.BuildArgs {
		if !envNameRe.MatchString(k) {
			return fieldErr(path+".build_args", "%q is not a valid build argument name", k)
		}
	}
	if p.Devcontainer == "" {
		return nil
	}
	dc, err := ParseDevcontainer(p.Devcontainer)
	if err != nil {
		return fieldErr(path+".devcontainer", "%v", err)
	}
	switch {
	case dc.Build.Dockerfile != "" && p.Dockerfile == "":
		return fieldErr(path+".dockerfile", "required: the devcontainer's build.dockerfile is %q, and its text travels in the spec", dc.Build.Dockerfile)
	case dc.Build.Dockerfile == "" && p.Dockerfile != "":
		return fieldErr(path+".dockerfile", "set, but the devcontainer names an image, not a build.dockerfile")
	}
	return nil
}

// ProjectEnvAllowed reports whether a project's image may set the
// variable name (a devcontainer's containerEnv, an ENV of its
// Dockerfile): none of the runtime's own (ReservedEnv), which would undo
// what the manager decided, but PATH, which a toolchain's image extends.
func ProjectEnvAllowed(name string) bool {
	return strings.ToUpper(name) == "PATH" || !ReservedEnv(name)
}

// validImageRef is a loose check of an image reference: no space, no
// control character, no leading dash, a sane length.
func validImageRef(s string) bool {
	if s == "" || len(s) > 255 || strings.HasPrefix(s, "-") {
		return false
	}
	return !strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f })
}

// Devcontainer is what the runtime honours of a devcontainer.json: the
// image or the Dockerfile it is built from (build.dockerfile, build.args,
// build.target), containerEnv (set in the image), remoteUser (the user
// the creation commands run as; the worker itself runs as uid 1000), and
// onCreateCommand, updateContentCommand and postCreateCommand, run in
// that order once, when the image is built, with no network. Fields that
// ask for what a worker is never given (features, mounts, runArgs,
// privileged, capAdd, securityOpt, initializeCommand, which would run on
// the host, dockerComposeFile, workspaceMount) are refused; the rest
// (name, customizations, forwardPorts, postStartCommand, ...) are ignored.
type Devcontainer struct {
	Image string `json:"image"`
	Build struct {
		Dockerfile string            `json:"dockerfile"`
		Args       map[string]string `json:"args"`
		Target     string            `json:"target"`
	} `json:"build"`
	ContainerEnv map[string]string `json:"containerEnv"`
	RemoteUser   string            `json:"remoteUser"`
	// Commands are the creation commands in the order they run, each a
	// shell line or an argument vector.
	Commands []DevCommand `json:"-"`
}

// DevCommand is one creation command: Shell for a string (run by
// /bin/sh -c), Args for an array (run as it is).
type DevCommand struct {
	Shell string
	Args  []string
}

// devcontainerRefused are the fields a worker's image cannot honour.
var devcontainerRefused = []string{"features", "mounts", "runArgs", "privileged", "capAdd", "securityOpt",
	"initializeCommand", "dockerComposeFile", "workspaceMount"}

// ParseDevcontainer reads a devcontainer.json (comments and trailing
// commas allowed, as the format allows them).
func ParseDevcontainer(text string) (Devcontainer, error) {
	data := StripJSONC([]byte(text))
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return Devcontainer{}, fmt.Errorf("not a JSON object: %v", err)
	}
	for _, f := range devcontainerRefused {
		if _, ok := fields[f]; ok {
			return Devcontainer{}, fmt.Errorf("%s is not honoured in a worker (nothing of the host and no added privilege reaches one)", f)
		}
	}
	var dc Devcontainer
	if err := json.Unmarshal(data, &dc); err != nil {
		return Devcontainer{}, err
	}
	if (dc.Image == "") == (dc.Build.Dockerfile == "") {
		return Devcontainer{}, fmt.Errorf("want one of image or build.dockerfile")
	}
	if dc.Image != "" && !validImageRef(dc.Image) {
		return Devcontainer{}, fmt.Errorf("image %q is not an image reference", dc.Image)
	}
	for k := range dc.ContainerEnv {
		if !envNameRe.MatchString(k) {
			return Devcontainer{}, fmt.Errorf("containerEnv: %q is not a valid environment variable name", k)
		}
		if !ProjectEnvAllowed(k) {
			return Devcontainer{}, fmt.Errorf("containerEnv: %s is set by the runtime", k)
		}
	}
	if strings.ContainsAny(dc.RemoteUser, " \t\n\r") {
		return Devcontainer{}, fmt.Errorf("remoteUser %q has a space", dc.RemoteUser)
	}
	for _, name := range []string{"onCreateCommand", "updateContentCommand", "postCreateCommand"} {
		raw, ok := fields[name]
		if !ok {
			continue
		}
		cmds, err := devCommands(raw)
		if err != nil {
			return Devcontainer{}, fmt.Errorf("%s: %v", name, err)
		}
		dc.Commands = append(dc.Commands, cmds...)
	}
	return dc, nil
}

// devCommands reads a lifecycle command: a string, an array of strings,
// or an object of named commands (run here one after another, by name).
func devCommands(raw json.RawMessage) ([]DevCommand, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s == "" {
			return nil, nil
		}
		return []DevCommand{{Shell: s}}, nil
	}
	var args []string
	if json.Unmarshal(raw, &args) == nil {
		if len(args) == 0 {
			return nil, nil
		}
		return []DevCommand{{Args: args}}, nil
	}
	var named map[string]json.RawMessage
	if err := json.Unmarshal(raw, &named); err != nil {
		return nil, fmt.Errorf("want a string, an array of strings or an object of them")
	}
	names := make([]string, 0, len(named))
	for k := range named {
		names = append(names, k)
	}
	slices.Sort(names)
	var out []DevCommand
	for _, k := range names {
		var one []DevCommand
		if json.Unmarshal(named[k], &s) == nil {
			one = []DevCommand{{Shell: s}}
		} else if json.Unmarshal(named[k], &args) == nil {
			one = []DevCommand{{Args: args}}
		} else {
			return nil, fmt.Errorf("%s: want a string or an array of strings", k)
		}
		out = append(out, one...)
	}
	return out, nil
}

// StripJSONC removes the // and /* */ comments and the trailing commas
// of JSON with comments, leaving strings as they are.
func StripJSONC(in []byte) []byte {
	return jsonScan(jsonScan(in, dropComment), dropTrailingComma)
}

// jsonScan copies in, strings as they are, and hands every other byte
// to f, which writes what stays and says how many bytes it consumed.
func jsonScan(in []byte, f func(out *bytes.Buffer, in []byte, i int) int) []byte {
	var out bytes.Buffer
	for i := 0; i < len(in); {
		if in[i] != '"' {
			i += f(&out, in, i)
			continue
		}
		j := i + 1
		for j < len(in) && in[j] != '"' {
			if in[j] == '\\' {
				j++
			}
			j++
		}
		end := min(j+1, len(in))
		out.Write(in[i:end])
		i = end
	}
	return out.Bytes()
}

func dropComment(out *bytes.Buffer, in []byte, i int) int {
	switch {
	case in[i] == '/' && i+1 < len(in) && in[i+1] == '/':
		end := bytes.IndexByte(in[i:], '\n')
		if end < 0 {
			return len(in) - i
		}
		return end // the line break stays
	case in[i] == '/' && i+1 < len(in) && in[i+1] == '*':
		end := bytes.Index(in[i+2:], []byte("*/"))
		out.WriteByte(' ')
		if end < 0 {
			return len(in) - i // an unclosed comment ends the text; the JSON parser says what is missing
		}
		return end + 4
	}
	out.WriteByte(in[i])
	return 1
}

func dropTrailingComma(out *bytes.Buffer, in []byte, i int) int {
	if in[i] == ',' {
		rest := bytes.TrimLeft(in[i+1:], " \t\r\n")
		if len(rest) > 0 && (rest[0] == '}' || rest[0] == ']') {
			return 1
		}
	}
	out.WriteByte(in[i])
	return 1
}
