package docs_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const module = "github.com/card-dev/card"

// A name kept alive in one package for a type or value of another of
// card's packages (type Usage = api.Usage) is a second name for one thing:
// callers then meet both, and the renames that left them behind are never
// finished. Product code names the thing where it lives; this check
// refuses a new re-export alias in any non-test file.
func TestNoPackageReExportsAnotherOfCardsPackagesUnderAnAlias(t *testing.T) {
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	var found []string
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "node_modules", ".git", "testdata":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		for _, name := range reExports(f) {
			found = append(found, rel+": "+name)
		}
		return nil
	})
	require.NoError(t, err)
	assert.Empty(t, found, "re-export aliases of card's own packages; name the thing where it is declared instead")
}

// reExports are f's exported names declared as nothing but another of
// card's packages' name: type X = pkg.Y, const X = pkg.Y, var X = pkg.Y.
func reExports(f *ast.File) []string {
	inRepo := map[string]bool{}
	for _, im := range f.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		if p != module && !strings.HasPrefix(p, module+"/") {
			continue
		}
		name := p[strings.LastIndex(p, "/")+1:]
		if im.Name != nil {
			name = im.Name.Name
		}
		inRepo[name] = true
	}
	isCards := func(e ast.Expr) bool {
		if ix, ok := e.(*ast.IndexExpr); ok { // a generic type's instance
			e = ix.X
		}
		sel, ok := e.(*ast.SelectorExpr)
		if !ok {
			return false
		}
		id, ok := sel.X.(*ast.Ident)
		return ok && inRepo[id.Name]
	}
	var out []string
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok {
			continue
		}
		for _, spec := range gd.Specs {
			switch s := spec.(type) {
			case *ast.TypeSpec:
				if s.Assign.IsValid() && s.Name.IsExported() && isCards(s.Type) {
					out = append(out, "type "+s.Name.Name)
				}
			case *ast.ValueSpec:
				for i, n := range s.Names {
					if n.IsExported() && i < len(s.Values) && isCards(s.Values[i]) {
						out = append(out, gd.Tok.String()+" "+n.Name)
					}
				}
			}
		}
	}
	return out
}
