package protocol

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// markdownDocs are the documents a reader opens first, relative to this
// module: the README of the repository and of each part, the guides of
// docs/, and this protocol. (scripts/checkdocs, in make test, checks
// every Markdown file of the repository the same way and more.)
var markdownDocs = []string{
	"../README.md", "../SECURITY.md", "../BENCHMARKS.md", "../FAULTS.md", "PROTOCOL.md", "../spawner/CONTROLPLANE.md", "../spawner/INTERNALS.md",
	"../spawner/README.md", "../wrapper/README.md", "../images/README.md", "../gateway/README.md",
	"../docs/getting-started.md", "../docs/clients.md", "../docs/deploy-one-host.md", "../docs/deploy-many-hosts.md", "../docs/kubernetes.md",
	"../docs/operations.md", "../docs/agents.md", "../docs/configuration.md", "../docs/testing.md", "../docs/design.md",
	"../clients/python/README.md", "../clients/typescript/README.md", "../examples/compose/README.md",
}

// Every code fence of the documents opens and closes: a closing fence is
// alone on its line (text after it would make the rest of the document
// render as code), and no fence is left open at the end.
func TestMarkdownFencesClose(t *testing.T) {
	for _, p := range markdownDocs {
		f, err := os.Open(p)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		for _, problem := range fenceProblems(bufio.NewScanner(f)) {
			t.Errorf("%s: %s", filepath.Clean(p), problem)
		}
		f.Close()
	}
}

// fenceProblems reads a Markdown document and says where its fences
// (``` or ~~~, three or more) do not pair.
func fenceProblems(sc *bufio.Scanner) []string {
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var problems []string
	open, openLine := "", 0
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimLeft(sc.Text(), " ")
		marker := fenceMarker(line)
		switch {
		case marker == "":
		case open == "":
			open, openLine = marker, n
		case strings.HasPrefix(marker, open[:3]) && len(marker) >= len(open):
			if rest := strings.TrimSpace(line[len(marker):]); rest != "" {
				problems = append(problems, "line "+strconv.Itoa(n)+": text after a closing fence: "+rest)
			}
			open = ""
		}
	}
	if open != "" {
		problems = append(problems, "the fence opened on line "+strconv.Itoa(openLine)+" never closes")
	}
	return problems
}

// fenceMarker returns the run of backticks or tildes a fence line starts
// with ("" when the line is no fence).
func fenceMarker(line string) string {
	for _, c := range []string{"`", "~"} {
		n := len(line) - len(strings.TrimLeft(line, c))
		if n >= 3 {
			return line[:n]
		}
	}
	return ""
}

func TestFenceProblems(t *testing.T) {
	for _, tt := range []struct {
		doc  string
		want int
	}{
		{"a\n```go\nx\n```\nb\n", 0},
		{"```go\nx\n``` Runnable examples\ntext\n", 1},
		{"```\nx\n", 1},
		{"~~~~\n```\nnot a close\n~~~~\n", 0},
		{"````\n```\n````\n", 0},
	} {
		if got := fenceProblems(bufio.NewScanner(strings.NewReader(tt.doc))); len(got) != tt.want {
			t.Errorf("%q: %v, want %d problems", tt.doc, got, tt.want)
		}
	}
}

// Every relative link of the documents leads somewhere: the file exists,
// and an anchor into a Markdown file names one of its headings (as GitHub
// makes them: lower case, punctuation dropped, spaces as hyphens).
func TestMarkdownLinksResolve(t *testing.T) {
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, p := range markdownDocs {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		for _, m := range link.FindAllStringSubmatch(stripCode(string(b)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			path := p
			if file != "" {
				path = filepath.Join(filepath.Dir(p), file)
			}
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s: link %s: %v", filepath.Clean(p), target, err)
				continue
			}
			if anchor != "" && strings.HasSuffix(path, ".md") && !headingAnchors(path)[anchor] {
				t.Errorf("%s: link %s: no such heading in %s", filepath.Clean(p), target, filepath.Clean(path))
			}
		}
	}
}

// stripCode drops fenced blocks and inline code, where brackets are code.
func stripCode(doc string) string {
	return regexp.MustCompile("`[^`\n]*`").ReplaceAllString(stripFences(doc), "")
}

// headingAnchors returns the anchors of a Markdown file's headings.
func headingAnchors(path string) map[string]bool {
	b, _ := os.ReadFile(path)
	anchors := map[string]bool{}
	for _, line := range strings.Split(stripFences(string(b)), "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		var a strings.Builder
		for _, r := range h {
			switch {
			case r == ' ':
				a.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				a.WriteRune(r)
			}
		}
		anchors[a.String()] = true
	}
	return anchors
}

// stripFences drops the fenced blocks of a Markdown document.
func stripFences(doc string) string {
	var out strings.Builder
	inFence := false
	for _, line := range strings.Split(doc, "\n") {
		if fenceMarker(strings.TrimLeft(line, " ")) != "" {
			inFence = !inFence
			continue
		}
		if !inFence {
			out.WriteString(line + "\n")
		}
	}
	return out.String()
}
