package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// checkExamples compiles or parses every code block whose language it
// knows; a block marked skip is counted, with its reason, and left alone.
// A language it does not know (text, yaml, console, a bare fence) is
// left alone too: those are output and listings, not programs.
func (r *run) checkExamples() {
	byLang := map[string][]block{}
	for _, d := range r.docs {
		for _, b := range d.blocks {
			lang := canonical(b.lang)
			if lang == "" {
				continue
			}
			r.nblocks++
			r.langs[lang]++
			if b.skip != "" {
				r.skipped = append(r.skipped, fmt.Sprintf("%s:%d (%s): %s", b.file, b.line, lang, b.skip))
				continue
			}
			byLang[lang] = append(byLang[lang], b)
		}
	}
	tmp, err := os.MkdirTemp("", "checkdocs")
	if err != nil {
		r.fail("checkdocs", 0, "%v", err)
		return
	}
	defer os.RemoveAll(tmp)
	// The compilers run side by side: each is a process of its own that
	// mostly waits.
	var wg sync.WaitGroup
	wg.Go(func() { r.checkGo(filepath.Join(tmp, "go"), byLang["go"]) })
	wg.Go(func() { r.checkPython(filepath.Join(tmp, "python"), byLang["python"]) })
	wg.Go(func() { r.checkTypeScript(filepath.Join(tmp, "ts"), byLang["ts"]) })
	wg.Go(func() { r.checkShell(byLang["sh"]) })
	wg.Go(func() { r.checkJSON(byLang["json"]) })
	wg.Wait()
}

// canonical names the checker for a fence's language ("" for none).
func canonical(lang string) string {
	switch lang {
	case "go", "golang":
		return "go"
	case "python", "py", "python3":
		return "python"
	case "ts", "typescript":
		return "ts"
	case "sh", "bash", "shell":
		return "sh"
	case "json":
		return "json"
	}
	return ""
}

// packageClause finds a Go file's package clause (after its comments).
var packageClause = regexp.MustCompile(`(?m)^package [A-Za-z_][A-Za-z0-9_]*\s*$`)

// checkGo compiles every Go example, each a package of its own in a
// module that a go.work joins to the repository's modules, in one go vet.
// An example is a whole file: a fragment cannot be compiled, so it must
// become a program or say why it is skipped.
func (r *run) checkGo(dir string, blocks []block) {
	if len(blocks) == 0 {
		return
	}
	uses, err := workspaceModules(r.root)
	if err != nil {
		r.fail("go.work", 0, "%v", err)
		return
	}
	names := map[string]block{}
	for i, b := range blocks {
		if !packageClause.MatchString(b.text) {
			r.fail(b.file, b.line, "a Go fragment (no package clause): make it a whole file that compiles, or mark it <!-- checkdocs: skip: why -->")
			continue
		}
		name := "ex" + strconv.Itoa(i)
		names[name] = b
		if err := writeFile(filepath.Join(dir, name, "example.go"), b.text); err != nil {
			r.fail("checkdocs", 0, "%v", err)
			return
		}
	}
	if len(names) == 0 {
		return
	}
	work := "go 1.26.0\n\nuse (\n\t.\n"
	for _, u := range uses {
		work += "\t" + u + "\n"
	}
	work += ")\n"
	sum, _ := os.ReadFile(filepath.Join(r.root, "go.work.sum"))
	for name, text := range map[string]string{"go.mod": "module checkdocs.example\n\ngo 1.26.0\n", "go.work": work, "go.work.sum": string(sum)} {
		if err := writeFile(filepath.Join(dir, name), text); err != nil {
			r.fail("checkdocs", 0, "%v", err)
			return
		}
	}
	// go vet type-checks each example as the compiler does (and vets
	// it), without the link a build would spend seconds on.
	cmd := exec.Command("go", "vet", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK="+filepath.Join(dir, "go.work"), "GOFLAGS=")
	out, err := cmd.CombinedOutput()
	if err == nil {
		return
	}
	// Each error line names ./exN/example.go:line:col; report it at the
	// document's line.
	reported := false
	for _, line := range strings.Split(string(out), "\n") {
		m := goErr.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		b := names[m[1]]
		n, _ := strconv.Atoi(m[2])
		r.fail(b.file, b.line+n, "go vet: %s", m[3])
		reported = true
	}
	if !reported {
		r.fail("checkdocs", 0, "go vet of the Go examples: %v\n%s", err, out)
	}
}

var goErr = regexp.MustCompile(`(ex\d+)/example\.go:(\d+):\d+: (.*)`)

// workspaceModules returns the repository's go.work modules as absolute
// directories.
func workspaceModules(root string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(root, "go.work"))
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	var dirs []string
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "use ("):
			in = true
		case in && line == ")":
			in = false
		case in && line != "":
			dirs = append(dirs, filepath.Join(abs, line))
		case strings.HasPrefix(line, "use "):
			dirs = append(dirs, filepath.Join(abs, strings.TrimSpace(strings.TrimPrefix(line, "use "))))
		}
	}
	if len(dirs) == 0 {
		return nil, errors.New("no use directive")
	}
	return dirs, nil
}

// checkPython compiles every Python example, as py_compile does.
func (r *run) checkPython(dir string, blocks []block) {
	if len(blocks) == 0 {
		return
	}
	var files []string
	for i, b := range blocks {
		f := filepath.Join(dir, "ex"+strconv.Itoa(i)+".py")
		if err := writeFile(f, b.text); err != nil {
			r.fail("checkdocs", 0, "%v", err)
			return
		}
		files = append(files, f)
	}
	const script = `import sys
for i, p in enumerate(sys.argv[1:]):
    try:
        compile(open(p).read(), p, "exec", dont_inherit=True)
    except SyntaxError as e:
        print(i, e.lineno or 0, e.msg)
`
	out, err := exec.Command("python3", append([]string{"-c", script}, files...)...).CombinedOutput()
	if err != nil {
		r.fail("checkdocs", 0, "python3 (make setup installs it): %v\n%s", err, out)
		return
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.SplitN(line, " ", 3)
		if len(f) < 3 {
			continue
		}
		i, _ := strconv.Atoi(f[0])
		n, _ := strconv.Atoi(f[1])
		r.fail(blocks[i].file, blocks[i].line+n, "python: %s", f[2])
	}
}

// checkTypeScript type-checks every TypeScript example with the tsc of
// clients/typescript (npm ci there when its packages are missing), each
// a module that may import @agentvisor/client, which resolves to the
// client's sources.
func (r *run) checkTypeScript(dir string, blocks []block) {
	if len(blocks) == 0 {
		return
	}
	client, err := filepath.Abs(filepath.Join(r.root, "clients", "typescript"))
	if err != nil {
		r.fail("checkdocs", 0, "%v", err)
		return
	}
	tsc := filepath.Join(client, "node_modules", "typescript", "bin", "tsc")
	if _, err := os.Stat(tsc); err != nil {
		npm := exec.Command("npm", "ci", "--no-audit", "--no-fund")
		npm.Dir = client
		if out, err := npm.CombinedOutput(); err != nil {
			r.fail("clients/typescript", 0, "npm ci (make setup installs node and npm): %v\n%s", err, out)
			return
		}
	}
	var files []string
	for i, b := range blocks {
		name := "ex" + strconv.Itoa(i) + ".ts"
		if err := writeFile(filepath.Join(dir, name), b.text); err != nil {
			r.fail("checkdocs", 0, "%v", err)
			return
		}
		files = append(files, name)
	}
	config := map[string]any{
		"compilerOptions": map[string]any{
			"target": "ES2022", "module": "NodeNext", "moduleResolution": "NodeNext", "lib": []string{"ES2022"},
			"strict": true, "noEmit": true, "skipLibCheck": true,
			"types": []string{"node"}, "typeRoots": []string{filepath.Join(client, "node_modules", "@types")},
			"paths": map[string][]string{"@agentvisor/client": {filepath.Join(client, "src", "index.ts")}},
		},
		"files": files,
	}
	cj, _ := json.MarshalIndent(config, "", "  ")
	if err := writeFile(filepath.Join(dir, "tsconfig.json"), string(cj)); err != nil {
		r.fail("checkdocs", 0, "%v", err)
		return
	}
	// Top-level await needs the examples to be ES modules.
	if err := writeFile(filepath.Join(dir, "package.json"), `{"type": "module"}`); err != nil {
		r.fail("checkdocs", 0, "%v", err)
		return
	}
	cmd := exec.Command("node", tsc, "-p", "tsconfig.json")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err == nil {
		return
	}
	reported := false
	for _, line := range strings.Split(string(out), "\n") {
		m := tsErr.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		i, _ := strconv.Atoi(m[1])
		n, _ := strconv.Atoi(m[2])
		r.fail(blocks[i].file, blocks[i].line+n, "tsc: %s", m[3])
		reported = true
	}
	if !reported {
		r.fail("checkdocs", 0, "tsc of the TypeScript examples: %v\n%s", err, out)
	}
}

var tsErr = regexp.MustCompile(`^ex(\d+)\.ts\((\d+),\d+\): (.*)`)

// checkShell parses every shell example with bash -n: it runs nothing.
func (r *run) checkShell(blocks []block) {
	for _, b := range blocks {
		cmd := exec.Command("bash", "-n")
		cmd.Stdin = strings.NewReader(b.text)
		if out, err := cmd.CombinedOutput(); err != nil {
			msg := strings.TrimSpace(string(out))
			if m := shErr.FindStringSubmatch(msg); m != nil {
				n, _ := strconv.Atoi(m[1])
				r.fail(b.file, b.line+n, "bash -n: %s", m[2])
				continue
			}
			r.fail(b.file, b.line, "bash -n: %v %s", err, msg)
		}
	}
}

var shErr = regexp.MustCompile(`(?s)line (\d+): (.*)`)

// checkJSON decodes every JSON example: one value or several in a row.
func (r *run) checkJSON(blocks []block) {
	for _, b := range blocks {
		dec := json.NewDecoder(strings.NewReader(b.text))
		for {
			var v any
			err := dec.Decode(&v)
			if err == io.EOF {
				break
			}
			if err != nil {
				n := 1 + bytes.Count([]byte(b.text[:min(int(dec.InputOffset()), len(b.text))]), []byte("\n"))
				r.fail(b.file, b.line+n, "json: %v", err)
				break
			}
		}
	}
}

func writeFile(path, text string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(text), 0o644)
}
