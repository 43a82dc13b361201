package rdb

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// This package owns every Redis call of the spawner module. The test
// below holds it to that: it type-checks every package of the module but
// this one (their non-test files; tests seed and inspect Redis directly,
// on purpose) and fails on each call that talks to Redis.
//
// A call talks to Redis when it is a method of go-redis that takes a
// context: every command (Cmdable's HGet, XAdd, ...), a pipeline's Exec,
// TxPipelined, Script.Run. What takes no context sends nothing: a
// client's Close and AddHook (opening and configuring a client is its
// owner's business), a pipeline being built, a command's Result or Err,
// a hook's Cmder.Name. Types of go-redis (XMessage, Cmdable fields) are
// no calls either. The client module (client.Fleet, client.Watcher, ...)
// is the other Redis layer, and its calls are its own.
//
// Run it alone (it prints each call it finds):
//
//	cd spawner && go test -count=1 -run TestRDBOwnsEveryRedisCall -v ./internal/rdb

const (
	goRedis    = "github.com/redis/go-redis/v9"
	modulePath = "github.com/agentvisor/agentvisor/spawner"
	thisPkg    = modulePath + "/internal/rdb"
)

// listedPackage is what the check reads of `go list -json`.
type listedPackage struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	Export     string
	DepOnly    bool
	Module     *struct{ Path string }
}

func TestRDBOwnsEveryRedisCall(t *testing.T) {
	calls, pkgs, err := redisCallsOutside()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("checked %d packages: %s", len(pkgs), strings.Join(pkgs, " "))
	for _, c := range calls {
		t.Errorf("a Redis call outside spawner/internal/rdb (give rdb a method for it): %s", c)
	}
	t.Logf("%d Redis calls outside spawner/internal/rdb", len(calls))
}

// redisCallsOutside returns "file:line: receiver.Method" for each use of
// a go-redis method that takes a context, in the non-test files of every
// package of the module but this one, and the packages it checked.
func redisCallsOutside() (calls, checked []string, err error) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		return nil, nil, fmt.Errorf("the check type-checks with the go tool's export data: %w", err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(gobin, "list", "-e=false", "-export", "-deps", "-json", modulePath+"/...")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, nil, fmt.Errorf("go list: %w: %s", err, stderr.String())
	}
	exports := map[string]string{}
	var mine []listedPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p listedPackage
		if err := dec.Decode(&p); err != nil {
			return nil, nil, fmt.Errorf("go list's answer: %w", err)
		}
		exports[p.ImportPath] = p.Export
		if !p.DepOnly && p.Module != nil && p.Module.Path == modulePath && p.ImportPath != thisPkg {
			mine = append(mine, p)
		}
	}
	if len(mine) == 0 {
		return nil, nil, fmt.Errorf("go list found no package of %s", modulePath)
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		f, ok := exports[path]
		if !ok || f == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	})
	for _, p := range mine {
		checked = append(checked, "."+strings.TrimPrefix(p.ImportPath, modulePath))
		var files []*ast.File
		for _, name := range p.GoFiles {
			f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.SkipObjectResolution)
			if err != nil {
				return nil, nil, err
			}
			files = append(files, f)
		}
		info := &types.Info{Selections: map[*ast.SelectorExpr]*types.Selection{}}
		conf := types.Config{Importer: imp}
		if _, err := conf.Check(p.ImportPath, fset, files, info); err != nil {
			return nil, nil, fmt.Errorf("type-check %s: %w", p.ImportPath, err)
		}
		for _, f := range files {
			// Every selection of such a method, called here or taken
			// as a method value to be called elsewhere.
			ast.Inspect(f, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				s, ok := info.Selections[sel]
				if !ok || s.Kind() != types.MethodVal || !talksToRedis(s.Obj().(*types.Func)) {
					return true
				}
				pos := fset.Position(sel.Sel.Pos())
				rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, modulePath)+"/"+filepath.Base(pos.Filename), "/")
				calls = append(calls, fmt.Sprintf("%s:%d: %s", rel, pos.Line, types.ExprString(sel)))
				return true
			})
		}
	}
	return calls, checked, nil
}

// talksToRedis reports whether m is a go-redis method that takes a
// context (see above).
func talksToRedis(m *types.Func) bool {
	if m.Pkg() == nil || m.Pkg().Path() != goRedis {
		return false
	}
	params := m.Type().(*types.Signature).Params()
	if params.Len() == 0 {
		return false
	}
	named, ok := params.At(0).Type().(*types.Named)
	return ok && named.Obj().Pkg() != nil && named.Obj().Pkg().Path() == "context" && named.Obj().Name() == "Context"
}

// families are the interfaces this package opens its files with.
var families = map[string]reflect.Type{
	"Conn":         reflect.TypeFor[Conn](),
	"Admission":    reflect.TypeFor[Admission](),
	"WorkerStatus": reflect.TypeFor[WorkerStatus](),
	"Streams":      reflect.TypeFor[Streams](),
	"Tasks":        reflect.TypeFor[Tasks](),
	"Runs":         reflect.TypeFor[Runs](),
	"Projects":     reflect.TypeFor[Projects](),
	"HostRegistry": reflect.TypeFor[HostRegistry](),
	"Hibernation":  reflect.TypeFor[Hibernation](),
	"Retirement":   reflect.TypeFor[Retirement](),
	"Pools":        reflect.TypeFor[Pools](),
	"Managers":     reflect.TypeFor[Managers](),
	"Leases":       reflect.TypeFor[Leases](),
	"LastUse":      reflect.TypeFor[LastUse](),
	"NetnsMarks":   reflect.TypeFor[NetnsMarks](),
	"ACL":          reflect.TypeFor[ACL](),
}

// TestEveryMethodHasOneFamily: each exported method of RDB is in exactly
// one family's interface, so that a new method is given its family.
func TestEveryMethodHasOneFamily(t *testing.T) {
	in := map[string][]string{}
	for name, f := range families {
		for i := range f.NumMethod() {
			in[f.Method(i).Name] = append(in[f.Method(i).Name], name)
		}
	}
	rt := reflect.TypeFor[*RDB]()
	for i := range rt.NumMethod() {
		m := rt.Method(i).Name
		switch len(in[m]) {
		case 1:
		case 0:
			t.Errorf("RDB.%s is in no family's interface", m)
		default:
			t.Errorf("RDB.%s is in %d families: %v", m, len(in[m]), in[m])
		}
		delete(in, m)
	}
	t.Logf("%d methods of RDB in %d interfaces", rt.NumMethod(), len(families))
}
