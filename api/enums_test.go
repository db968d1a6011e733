package api

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// constsOf reads this package's source for the string constants declared
// with type typ ("" for untyped ones whose name starts with prefix).
func constsOf(t *testing.T, typ, prefix string) []string {
	t.Helper()
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	require.NoError(t, err)
	var files []*ast.File
	for _, n := range names {
		if strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, n, nil, 0)
		require.NoError(t, err)
		files = append(files, f)
	}
	var out []string
	for _, f := range files {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				named := ""
				if id, ok := vs.Type.(*ast.Ident); ok {
					named = id.Name
				}
				for i, n := range vs.Names {
					if named != typ || (typ == "" && !strings.HasPrefix(n.Name, prefix)) || i >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					v, err := strconv.Unquote(lit.Value)
					require.NoError(t, err)
					out = append(out, v)
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

func sorted(ss []string) []string {
	out := append([]string{}, ss...)
	sort.Strings(out)
	return out
}

// A value declared for an enumerated type but missing from its list would
// be a value clients' generated unions say cannot come.
func TestEveryEnumListsEveryConstantOfItsType(t *testing.T) {
	for _, tc := range []struct {
		typ    string
		values []string
	}{
		{"Status", Status("").EnumValues()},
		{"RunState", RunState("").EnumValues()},
		{"SessionState", SessionState("").EnumValues()},
		{"ExecState", ExecState("").EnumValues()},
		{"AuthKind", AuthKind("").EnumValues()},
		{"ReadOnlyEnforcement", ReadOnlyEnforcement("").EnumValues()},
		{"PathStatus", PathStatus("").EnumValues()},
		{"HealthStatus", HealthStatus("").KnownValues()},
		{"Source", Source("").KnownValues()},
	} {
		consts := constsOf(t, tc.typ, "")
		require.NotEmpty(t, consts, tc.typ)
		assert.Equal(t, consts, sorted(tc.values), tc.typ)
	}
}

// A run error's kinds are listed twice, as constants and in the schema's
// x-enum on RunError.Kind (a struct tag cannot name the constants).
func TestTheRunErrorKindsInTheSchemaAreTheConstants(t *testing.T) {
	assert.Equal(t, constsOf(t, "", "Kind"), sorted(ErrorKinds))
	f, ok := reflect.TypeOf(RunError{}).FieldByName("Kind")
	require.True(t, ok)
	var tagged []string
	for _, kv := range strings.Split(f.Tag.Get("jsonschema_extras"), ",") {
		if v, ok := strings.CutPrefix(kv, "x-enum="); ok {
			tagged = append(tagged, v)
		}
	}
	assert.Equal(t, ErrorKinds, tagged)
}
