//go:build ignore

// codeshape prints the shape of the repository's production Go code:
// the types with the most methods, the functions over a length, the files
// over a length, and the two boundaries the spawner keeps (the Docker SDK
// imported only by its Docker engine and image builder; go-redis commands
// only in its rdb packages, which TestRDBOwnsEveryRedisCall checks by
// type). Test files, node_modules and testdata are left out.
//
//	go run scripts/codeshape.go [-types 10] [-func 100] [-file 600] [dir]
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// shape is what the walk found.
type shape struct {
	methods       map[string]int // "dir.Type" → its methods
	funcs, files  []sized        // over the limits
	dockerImports map[string]bool
}

type sized struct {
	name  string
	lines int
}

func main() {
	topTypes := flag.Int("types", 10, "how many types to list, most methods first")
	funcMax := flag.Int("func", 100, "list functions longer than this many lines")
	fileMax := flag.Int("file", 600, "list files longer than this many lines")
	flag.Parse()
	root := "."
	if flag.NArg() > 0 {
		root = flag.Arg(0)
	}
	sh := shape{methods: map[string]int{}, dockerImports: map[string]bool{}}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "node_modules", "testdata", ".git", ".cache":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		sh.add(fset, f, rel, *funcMax, *fileMax)
		return nil
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "codeshape:", err)
		os.Exit(1)
	}
	sh.print(*topTypes, *funcMax, *fileMax)
}

// add measures one file.
func (sh *shape) add(fset *token.FileSet, f *ast.File, rel string, funcMax, fileMax int) {
	dir := filepath.Dir(rel)
	if n := fset.Position(f.End()).Line; n > fileMax {
		sh.files = append(sh.files, sized{rel, n})
	}
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		if strings.HasPrefix(p, "github.com/docker/docker/") && strings.HasPrefix(rel, "spawner"+string(filepath.Separator)) &&
			!strings.HasPrefix(rel, filepath.Join("spawner", "engine", "docker")) && !strings.HasPrefix(rel, filepath.Join("spawner", "images")) {
			sh.dockerImports[rel] = true
		}
	}
	for _, decl := range f.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Body == nil {
			continue
		}
		name := fn.Name.Name
		if fn.Recv != nil && len(fn.Recv.List) == 1 {
			t := fn.Recv.List[0].Type
			if s, ok := t.(*ast.StarExpr); ok {
				t = s.X
			}
			if ix, ok := t.(*ast.IndexExpr); ok {
				t = ix.X
			}
			if id, ok := t.(*ast.Ident); ok {
				sh.methods[dir+"."+id.Name]++
				name = id.Name + "." + name
			}
		}
		if n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1; n > funcMax {
			sh.funcs = append(sh.funcs, sized{rel + ":" + name, n})
		}
	}
}

func (sh *shape) print(topTypes, funcMax, fileMax int) {
	type count struct {
		name string
		n    int
	}
	var ts []count
	for k, v := range sh.methods {
		ts = append(ts, count{k, v})
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].n > ts[j].n || ts[i].n == ts[j].n && ts[i].name < ts[j].name })
	fmt.Println("types with the most methods:")
	for i, t := range ts {
		if i == topTypes {
			break
		}
		fmt.Printf("  %4d  %s\n", t.n, t.name)
	}
	byLines := func(s []sized) {
		sort.Slice(s, func(i, j int) bool { return s[i].lines > s[j].lines })
		for _, x := range s {
			fmt.Printf("  %4d  %s\n", x.lines, x.name)
		}
	}
	fmt.Printf("functions over %d lines: %d\n", funcMax, len(sh.funcs))
	byLines(sh.funcs)
	fmt.Printf("files over %d lines: %d\n", fileMax, len(sh.files))
	byLines(sh.files)
	var docker []string
	for f := range sh.dockerImports {
		docker = append(docker, f)
	}
	sort.Strings(docker)
	fmt.Printf("spawner files importing the Docker SDK outside engine/docker and images: %d\n", len(docker))
	for _, f := range docker {
		fmt.Println("  " + f)
	}
}
