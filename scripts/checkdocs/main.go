// Command checkdocs holds the repository's Markdown to what it says: every
// relative link leads to a file that exists, and every #anchor to a
// heading of it; every fence closes; every code example compiles or
// parses (Go against the workspace's modules, Python with py_compile,
// TypeScript with tsc against clients/typescript, shell with bash -n,
// JSON with a decoder); and every SVG a document shows parses, and
// renders in headless Chromium to a picture that is not blank.
//
// It runs in `make test` (make check-docs). It prints each problem as
// file:line: what, and exits 1 when there is one. A code block is exempt
// only when the line before its fence says why:
//
//	<!-- checkdocs: skip: a sketch of the planned Engine interface -->
//
// Usage: go run ./scripts/checkdocs [-root DIR] [-v]
package main

import (
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

func main() {
	root := flag.String("root", ".", "the repository's root")
	verbose := flag.Bool("v", false, "say what was checked, and each block skipped")
	flag.Parse()
	start := time.Now()
	r, err := newRun(*root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "checkdocs:", err)
		os.Exit(2)
	}
	r.checkLinks()
	r.checkFences()
	var wg sync.WaitGroup
	wg.Go(r.checkExamples)
	wg.Go(r.checkSVGs)
	wg.Wait()
	sort.Strings(r.problems)
	for _, p := range r.problems {
		fmt.Println(p)
	}
	if *verbose {
		for _, s := range r.skipped {
			fmt.Println("skipped:", s)
		}
	}
	fmt.Printf("checkdocs: %d documents, %d links, %d code blocks (%s), %d skipped with a reason; %d problems (%.1fs)\n",
		len(r.docs), r.nlinks, r.nblocks, r.langSummary(), len(r.skipped), len(r.problems), time.Since(start).Seconds())
	if len(r.problems) > 0 {
		os.Exit(1)
	}
}

// run is one pass of the checks over a repository.
type run struct {
	mu       sync.Mutex // guards problems and skipped: the checks run side by side
	root     string
	docs     []*doc
	byPath   map[string]*doc
	problems []string
	skipped  []string
	nlinks   int
	nblocks  int
	langs    map[string]int
}

// skipDirs are never searched for documents: dependencies, build
// outputs, caches.
var skipDirs = map[string]bool{".git": true, "node_modules": true, "bin": true, ".cache": true, "dist": true, "__pycache__": true}

func newRun(root string) (*run, error) {
	r := &run{root: root, byPath: map[string]*doc{}, langs: map[string]int{}}
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			if p != root && skipDirs[e.Name()] {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".md") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		d := parse(filepath.ToSlash(rel), string(b))
		r.docs = append(r.docs, d)
		r.byPath[d.path] = d
		return nil
	})
	return r, err
}

func (r *run) fail(file string, line int, format string, a ...any) {
	where := file
	if line > 0 {
		where = fmt.Sprintf("%s:%d", file, line)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.problems = append(r.problems, where+": "+fmt.Sprintf(format, a...))
}

func (r *run) checkFences() {
	for _, d := range r.docs {
		for _, p := range d.fences {
			r.fail(d.path, 0, "%s", p)
		}
	}
}

// checkLinks: a relative link names a file or directory of the
// repository, and its #anchor a heading of the Markdown file it names.
// Links that leave the repository (a scheme, mailto:) are not followed.
func (r *run) checkLinks() {
	for _, d := range r.docs {
		for _, l := range d.links() {
			r.nlinks++
			t := l.target
			if t == "" || strings.Contains(t, "://") || strings.HasPrefix(t, "mailto:") || strings.HasPrefix(t, "data:") {
				continue
			}
			file, anchor, _ := strings.Cut(t, "#")
			target := d.path
			if file != "" {
				if strings.HasPrefix(file, "/") {
					r.fail(d.path, l.line, "link %s: an absolute path; write it relative to this file", t)
					continue
				}
				target = filepath.ToSlash(filepath.Join(filepath.Dir(d.path), file))
				if strings.HasPrefix(target, "../") {
					r.fail(d.path, l.line, "link %s: leaves the repository", t)
					continue
				}
				if _, err := os.Stat(filepath.Join(r.root, target)); err != nil {
					r.fail(d.path, l.line, "link %s: no such file or directory %s", t, target)
					continue
				}
			}
			if anchor == "" || !strings.HasSuffix(target, ".md") {
				continue
			}
			if td := r.byPath[target]; td == nil || !td.anchors[anchor] {
				r.fail(d.path, l.line, "link %s: no heading of %s makes the anchor #%s", t, target, anchor)
			}
		}
	}
}

func (r *run) langSummary() string {
	var keys []string
	for k := range r.langs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, r.langs[k]))
	}
	return strings.Join(parts, ", ")
}
