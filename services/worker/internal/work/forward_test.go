package work

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The worker's stages only go forward: consumer → prepare → prepare
// holder → fire holder → ready queue → fire → settle → recorder. A firing
// that must wait again goes back through one port, a holder's AddAfter;
// each part of an Item has one writer; the fire stage makes the Outcome
// and the settle stage reads it. The tests below read the production
// source of the stages (go/parser: no types, so they look at names) and
// fail when a change breaks one of those rules, naming the file and line.

const internalPath = "github.com/sundialhq/sundial/services/worker/internal/"

// stageSource is the production source of one package under internal/.
type stageSource struct {
	name  string
	fset  *token.FileSet
	files []*ast.File
}

func readStage(t *testing.T, name string) stageSource {
	t.Helper()
	dir := filepath.Join("..", name)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	s := stageSource{name: name, fset: token.NewFileSet()}
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(s.fset, filepath.Join(dir, n), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		s.files = append(s.files, f)
	}
	if len(s.files) == 0 {
		t.Fatalf("no production source in %s", dir)
	}
	return s
}

// imports maps each file's local names of the worker's internal packages
// to the package's name (its last path element).
func imports(f *ast.File) map[string]string {
	m := map[string]string{}
	for _, im := range f.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		rel, ok := strings.CutPrefix(p, internalPath)
		if !ok {
			continue
		}
		local := rel[strings.LastIndex(rel, "/")+1:]
		if im.Name != nil {
			local = im.Name.Name
		}
		m[local] = rel
	}
	return m
}

// takesItem reports whether a parameter of ft is a *work.Item (an Item
// seen from inside package work, for the holder's own types).
func takesItem(ft *ast.FuncType, imp map[string]string) bool {
	for _, p := range ft.Params.List {
		star, ok := p.Type.(*ast.StarExpr)
		if !ok {
			continue
		}
		if sel, ok := star.X.(*ast.SelectorExpr); ok && sel.Sel.Name == "Item" {
			if id, ok := sel.X.(*ast.Ident); ok && imp[id.Name] == "work" {
				return true
			}
		}
	}
	return false
}

// earlier are the stages before each later stage, whose code it may not
// call to hand a firing back; uses lists what it may use of them all the
// same (by package.Name, and by stagePackage.Type.Method for calls on a
// field of that type).
var earlier = map[string]struct {
	stages []string
	uses   []string
}{
	"fire": {
		stages: []string{"consumer", "prepare", "holder", "readyq"},
		// prepare.Execution is the lease's view of a firing (a pure
		// function); the ready queue is the stage's input: it pops.
		uses: []string{"prepare.Execution", "readyq.Queue", "readyq.Queue.Pop", "readyq.Queue.PopCritical", "readyq.Queue.Done"},
	},
	"settle": {stages: []string{"consumer", "prepare", "holder", "readyq", "fire"}},
}

// handsOver are the ways a later stage may pass an item to something
// else: an interface method taking a *work.Item, as Interface.Method.
var handsOver = map[string][]string{
	// AddAfter is the holders' one port back; Settle, Stale and Unfired
	// go forward; Admit asks the limits and keeps the item.
	"fire":   {"Holder.AddAfter", "Limiter.Admit", "Settle.Settle", "Settle.Stale", "Settle.Unfired"},
	"settle": nil,
}

// A later stage cannot send a firing back except through a holder's
// AddAfter: it declares no other interface method or callback that takes
// an item, and calls nothing of an earlier stage but what it reads.
func TestLaterStagesGoBackOnlyThroughTheHolders(t *testing.T) {
	for _, name := range []string{"fire", "settle"} {
		s := readStage(t, name)
		rule := earlier[name]
		for _, f := range s.files {
			imp := imports(f)
			// The fields of this file's structs typed by an earlier
			// stage: field name → "stage.Type".
			fields := map[string]string{}
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.TypeSpec:
					switch tt := n.Type.(type) {
					case *ast.InterfaceType:
						for _, m := range tt.Methods.List {
							ft, ok := m.Type.(*ast.FuncType)
							if !ok || !takesItem(ft, imp) {
								continue
							}
							for _, mn := range m.Names {
								if id := n.Name.Name + "." + mn.Name; !slices.Contains(handsOver[name], id) {
									t.Errorf("%s: %s: %s takes a *work.Item: a firing goes back only through a holder's AddAfter (allowed: %v)",
										s.fset.Position(m.Pos()), name, id, handsOver[name])
								}
							}
						}
					case *ast.StructType:
						for _, fl := range tt.Fields.List {
							if ft, ok := fl.Type.(*ast.FuncType); ok && takesItem(ft, imp) {
								t.Errorf("%s: %s: struct %s has a callback that takes a *work.Item: a firing goes back only through a holder's AddAfter",
									s.fset.Position(fl.Pos()), name, n.Name.Name)
							}
							typ := fl.Type
							if st, ok := typ.(*ast.StarExpr); ok {
								typ = st.X
							}
							if sel, ok := typ.(*ast.SelectorExpr); ok {
								if id, ok := sel.X.(*ast.Ident); ok && slices.Contains(rule.stages, imp[id.Name]) {
									for _, fn := range fl.Names {
										fields[fn.Name] = imp[id.Name] + "." + sel.Sel.Name
									}
								}
							}
						}
					}
				case *ast.SelectorExpr:
					if id, ok := n.X.(*ast.Ident); ok && slices.Contains(rule.stages, imp[id.Name]) {
						if use := imp[id.Name] + "." + n.Sel.Name; !slices.Contains(rule.uses, use) {
							t.Errorf("%s: %s uses %s of an earlier stage (allowed: %v)", s.fset.Position(n.Pos()), name, use, rule.uses)
						}
					}
				}
				return true
			})
			// Calls on those fields: p.queue.Push(it) would hand an item
			// back to the ready queue.
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				m, ok := call.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				var field string
				switch x := m.X.(type) {
				case *ast.SelectorExpr:
					field = x.Sel.Name
				case *ast.Ident:
					field = x.Name
				}
				if typ, ok := fields[field]; ok {
					if use := typ + "." + m.Sel.Name; !slices.Contains(rule.uses, use) {
						t.Errorf("%s: %s calls %s of an earlier stage (allowed: %v)", s.fset.Position(call.Pos()), name, use, rule.uses)
					}
				}
				return true
			})
		}
	}
}

// part maps each field of an Item to the part it belongs to ("Trace" for
// the fields of *Trace, reached through it.Trace).
func itemParts() map[string]string {
	parts := map[string]string{}
	it := reflect.TypeFor[Item]()
	for i := range it.NumField() {
		f := it.Field(i)
		if !f.Anonymous {
			parts[f.Name] = f.Name
			continue
		}
		parts[f.Name] = f.Name
		for j := range f.Type.NumField() {
			parts[f.Type.Field(j).Name] = f.Name
		}
	}
	return parts
}

// writers are the parts of an Item each stage in this room may write.
// The consumer writes Facts, Owned and Trace (it starts the spans); the
// limits write Admission.
var writers = map[string][]string{
	"prepare": {"Prepared"},
	"holder":  {"Hold"},
	// The fire stage ends a firing's hold span, and opens another when
	// the firing waits again.
	"fire":   {"Trace"},
	"settle": nil,
}

// Each part of an Item is written by one stage: prepare writes only the
// lease it returns, the holders only their bookkeeping, the fire stage
// only the trace, the settle stage nothing.
func TestEachPartOfAnItemHasOneWriter(t *testing.T) {
	parts := itemParts()
	for _, name := range []string{"prepare", "holder", "fire", "settle"} {
		s := readStage(t, name)
		check := func(lhs ast.Expr) {
			sel, ok := lhs.(*ast.SelectorExpr)
			if !ok {
				return
			}
			part, ok := parts[sel.Sel.Name]
			if !ok {
				return
			}
			if x, ok := sel.X.(*ast.SelectorExpr); ok && x.Sel.Name == "Trace" {
				part = "Trace"
			}
			if !slices.Contains(writers[name], part) {
				t.Errorf("%s: %s writes %s (part %s of work.Item); its writers: %v", s.fset.Position(lhs.Pos()), name, sel.Sel.Name, part, writers[name])
			}
		}
		for _, f := range s.files {
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.AssignStmt:
					for _, l := range n.Lhs {
						check(l)
					}
				case *ast.IncDecStmt:
					check(n.X)
				}
				return true
			})
		}
	}
}

// The fire stage makes an Outcome; the settle stage reads it and writes
// none of its fields; no other stage makes one.
func TestFireMakesTheOutcomeSettleReadsIt(t *testing.T) {
	fields := map[string]bool{}
	ot := reflect.TypeFor[Outcome]()
	for i := range ot.NumField() {
		fields[ot.Field(i).Name] = true
	}
	made := 0
	for _, name := range []string{"consumer", "prepare", "holder", "readyq", "fire", "settle"} {
		s := readStage(t, name)
		for _, f := range s.files {
			imp := imports(f)
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.CompositeLit:
					sel, ok := n.Type.(*ast.SelectorExpr)
					if !ok || sel.Sel.Name != "Outcome" {
						return true
					}
					if id, ok := sel.X.(*ast.Ident); ok && imp[id.Name] == "work" {
						if name != "fire" {
							t.Errorf("%s: %s makes a work.Outcome; only the fire stage does", s.fset.Position(n.Pos()), name)
						}
						made++
					}
				case *ast.AssignStmt:
					if name != "settle" {
						return true
					}
					for _, l := range n.Lhs {
						// a.Result = …, a.Result.Err = …: the outermost
						// selector that names an Outcome field.
						for e := l; ; {
							sel, ok := e.(*ast.SelectorExpr)
							if !ok {
								break
							}
							if fields[sel.Sel.Name] {
								t.Errorf("%s: settle writes %s of the fire stage's work.Outcome", s.fset.Position(l.Pos()), sel.Sel.Name)
								break
							}
							e = sel.X
						}
					}
				}
				return true
			})
		}
	}
	if made == 0 {
		t.Fatal("the fire stage makes no work.Outcome: the rule checks nothing")
	}
}
