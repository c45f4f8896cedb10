// Command shape measures the shape of the product's code: lines per package,
// the largest non-test function and file of each, the fields of the largest
// struct of a package, its exported identifiers, and the time.Sleep calls in
// tests. It reads Go sources only and changes nothing.
//
//	cd bench && go run ./shape -root ..            # the tree of this checkout
//	cd bench && go run ./shape -root /tmp/before   # another checkout, to compare
//
// Complexity is gocyclo's (github.com/fzipp/gocyclo), run beside it:
// gocyclo -top 10 -ignore _test internal cmd.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"log"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	root := flag.String("root", "..", "root of the checkout to measure")
	focus := flag.String("package", "internal/worker", "package whose structs and exported identifiers are counted")
	flag.Parse()
	if err := run(*root, *focus); err != nil {
		log.Fatal(err)
	}
}

type pkgShape struct {
	dir        string
	lines      int
	bigFunc    string
	bigFuncLen int
	bigFile    string
	bigFileLen int
}

func run(root, focus string) error {
	pkgs := map[string]*pkgShape{}
	sleeps := 0
	fset := token.NewFileSet()
	var focusFiles []*ast.File
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || rel == "bench" || rel == "release" || d.Name() == "dist") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.HasSuffix(path, "_test.go") {
			sleeps += bytes.Count(src, []byte("time.Sleep("))
			return nil
		}
		dir := filepath.Dir(rel)
		if !strings.HasPrefix(dir, "internal") && !strings.HasPrefix(dir, "cmd") {
			return nil
		}
		ps := pkgs[dir]
		if ps == nil {
			ps = &pkgShape{dir: dir}
			pkgs[dir] = ps
		}
		n := bytes.Count(src, []byte("\n"))
		ps.lines += n
		if n > ps.bigFileLen {
			ps.bigFile, ps.bigFileLen = filepath.Base(path), n
		}
		f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if dir == filepath.FromSlash(focus) {
			focusFiles = append(focusFiles, f)
		}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			l := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
			if l > ps.bigFuncLen {
				ps.bigFunc, ps.bigFuncLen = funcName(fd), l
			}
		}
		return nil
	})
	if err != nil {
		return err
	}

	var list []*pkgShape
	total := 0
	for _, ps := range pkgs {
		list = append(list, ps)
		total += ps.lines
	}
	sort.Slice(list, func(i, j int) bool { return list[i].lines > list[j].lines })
	fmt.Printf("non-test lines: %d in %d packages\n\n", total, len(list))
	fmt.Printf("%-28s %6s  %-40s %5s  %-24s %5s\n", "package", "lines", "largest function", "lines", "largest file", "lines")
	for _, ps := range list {
		fmt.Printf("%-28s %6d  %-40s %5d  %-24s %5d\n", ps.dir, ps.lines, ps.bigFunc, ps.bigFuncLen, ps.bigFile, ps.bigFileLen)
	}

	structs, exported, fields := structsAndExports(focusFiles)
	fmt.Printf("\n%s: exported identifiers %d (top-level names and methods) + %d fields of exported structs\n", focus, exported, fields)
	fmt.Printf("%s: largest structs (fields):", focus)
	for i, s := range structs {
		if i == 5 {
			break
		}
		fmt.Printf(" %s %d;", s.name, s.fields)
	}
	fmt.Printf("\n\ntime.Sleep calls in tests: %d\n", sleeps)
	return nil
}

func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	t := fd.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	if ix, ok := t.(*ast.IndexExpr); ok {
		t = ix.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name + "." + fd.Name.Name
	}
	return fd.Name.Name
}

type structShape struct {
	name   string
	fields int
}

// structsAndExports returns the structs of files, largest first, the
// package's exported top-level names and methods, and the exported fields of
// its exported structs.
func structsAndExports(files []*ast.File) (structs []structShape, exported, fields int) {
	for _, f := range files {
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if d.Name.IsExported() {
					exported++
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							exported++
						}
						if st, ok := s.Type.(*ast.StructType); ok {
							n := 0
							for _, fl := range st.Fields.List {
								if len(fl.Names) == 0 {
									n++
								}
								n += len(fl.Names)
								for _, id := range fl.Names {
									if s.Name.IsExported() && id.IsExported() {
										fields++
									}
								}
							}
							structs = append(structs, structShape{s.Name.Name, n})
						}
					case *ast.ValueSpec:
						for _, id := range s.Names {
							if id.IsExported() {
								exported++
							}
						}
					}
				}
			}
		}
	}
	sort.Slice(structs, func(i, j int) bool { return structs[i].fields > structs[j].fields })
	return structs, exported, fields
}
