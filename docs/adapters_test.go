package docs

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
	"github.com/card-dev/card/spawn"
)

// repo is the module root, seen from this package's directory.
const repo = ".."

// maxAdapterGoFiles is how many Go files a new adapter may need, at most,
// before the per-adapter facts are spread too thin to add one with care.
const maxAdapterGoFiles = 6

// maxACPSpawnFiles is how many Go files of spawn/ an adapter that speaks
// ACP may need: its driver file, its one-shot parser and its line in
// drivers; the protocol is card's already.
const maxACPSpawnFiles = 3

// adapterFileList reads the file list of adding-an-agent.md: each item's
// first code span, exact paths and globs (holding *) apart.
func adapterFileList(t *testing.T) (exact, globs []string) {
	t.Helper()
	b, err := os.ReadFile("adding-an-agent.md")
	require.NoError(t, err)
	doc := string(b)
	start := strings.Index(doc, "<!-- files:adapter -->")
	end := strings.Index(doc, "<!-- /files -->")
	require.True(t, start >= 0 && end > start, "adding-an-agent.md has its file list between <!-- files:adapter --> and <!-- /files -->")
	item := regexp.MustCompile("(?m)^- `([^`]+)`")
	for _, m := range item.FindAllStringSubmatch(doc[start:end], -1) {
		if strings.Contains(m[1], "*") {
			globs = append(globs, m[1])
		} else {
			exact = append(exact, m[1])
		}
	}
	require.NotEmpty(t, exact)
	return exact, globs
}

func forBinary(pattern, binary string) string {
	return strings.ReplaceAll(pattern, "<binary>", binary)
}

// adapterConstants maps agent's id constants to their ids, read from the
// package's source so a new one is found without a change here.
func adapterConstants(t *testing.T) map[string]string {
	t.Helper()
	ids := agent.IDs()
	out := map[string]string{}
	files, err := filepath.Glob(filepath.Join(repo, "agent", "*.go"))
	require.NoError(t, err)
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		require.NoError(t, err, path)
		ast.Inspect(f, func(n ast.Node) bool {
			if vs, ok := n.(*ast.ValueSpec); ok {
				for i, name := range vs.Names {
					if i < len(vs.Values) {
						if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							if v, err := strconv.Unquote(lit.Value); err == nil && slices.Contains(ids, v) {
								out[name.Name] = v
							}
						}
					}
				}
			}
			return true
		})
	}
	require.Len(t, out, len(ids), "every adapter id is a constant of package agent")
	return out
}

// namedAdapters returns the ids a Go file names: as a string literal, as
// agent.<Constant>, or (inside package agent) as the bare constant.
func namedAdapters(t *testing.T, path string, constants map[string]string) map[string]bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	require.NoError(t, err, path)
	ids := agent.IDs()
	inAgent := f.Name.Name == "agent"
	out := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.BasicLit:
			if n.Kind == token.STRING {
				if v, err := strconv.Unquote(n.Value); err == nil && slices.Contains(ids, v) {
					out[v] = true
				}
			}
		case *ast.SelectorExpr:
			if x, ok := n.X.(*ast.Ident); ok && x.Name == "agent" {
				if id, ok := constants[n.Sel.Name]; ok {
					out[id] = true
				}
			}
		case *ast.Ident:
			if id, ok := constants[n.Name]; ok && inAgent {
				out[id] = true
			}
		}
		return true
	})
	return out
}

// productGoFiles lists the module's Go files that ship: not tests, not the
// end-to-end harness (which names the real binaries it drives), not the
// fake CLIs (which say what the real ones say), not dependencies.
func productGoFiles(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(repo, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repo, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			name := d.Name()
			if rel != "." && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "testdata" || rel == "e2e" ||
				(strings.HasPrefix(rel, "internal/") && strings.HasPrefix(name, "fake"))) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(rel, ".go") && !strings.HasSuffix(rel, "_test.go") {
			out = append(out, rel)
		}
		return nil
	})
	require.NoError(t, err)
	require.NotEmpty(t, out)
	return out
}

// The page that tells how to add an agent lists the files it takes, and the
// list stays true: every listed file exists for every adapter card has, no
// Go file outside the list names an adapter (so nothing an adapter needs is
// left off it), and a new adapter needs no more than maxAdapterGoFiles Go
// files.
func TestTheAddingAnAgentFileListIsCompleteForEveryAdapter(t *testing.T) {
	exact, globs := adapterFileList(t)
	var goFiles int
	for _, f := range exact {
		if strings.HasSuffix(f, ".go") {
			goFiles++
		}
	}
	assert.LessOrEqual(t, goFiles, maxAdapterGoFiles, "Go files a new adapter needs: %v", exact)

	binary := map[string]string{}
	for _, a := range agent.All() {
		binary[a.ID] = a.Binary
		for _, f := range exact {
			_, err := os.Stat(filepath.Join(repo, forBinary(f, a.Binary)))
			assert.NoError(t, err, "%s: the listed file %s", a.ID, f)
		}
	}

	constants := adapterConstants(t)
	for _, path := range productGoFiles(t) {
		for id := range namedAdapters(t, filepath.Join(repo, path), constants) {
			listed := slices.ContainsFunc(exact, func(f string) bool { return forBinary(f, binary[id]) == path })
			for _, g := range globs {
				if ok, _ := filepath.Match(forBinary(g, binary[id]), path); ok {
					listed = true
				}
			}
			assert.True(t, listed, "%s names the adapter %q but is not one of the files docs/adding-an-agent.md lists for it: "+
				"make what differs a field of the adapter's driver or probe, or list the file", path, id)
		}
	}
}

// An agent that speaks ACP on its stdio needs no protocol code of its own:
// the files spawn/ has for it, of those the page lists, are at most
// maxACPSpawnFiles.
func TestAnAgentSpeakingACPNeedsAtMostThreeGoFilesInSpawn(t *testing.T) {
	exact, globs := adapterFileList(t)
	var acpAdapters int
	for _, id := range spawn.IDs() {
		a, _ := spawn.Lookup(id)
		if len(a.Protocols) != 1 || a.Protocols[spawn.ProtocolACP] == nil {
			continue
		}
		acpAdapters++
		files := map[string]bool{}
		for _, f := range exact {
			if strings.HasPrefix(f, "spawn/") {
				files[forBinary(f, a.Binary)] = true
			}
		}
		for _, g := range globs {
			matches, err := filepath.Glob(filepath.Join(repo, forBinary(g, a.Binary)))
			require.NoError(t, err)
			for _, m := range matches {
				if rel, _ := filepath.Rel(repo, m); strings.HasPrefix(rel, "spawn/") && !strings.HasSuffix(rel, "_test.go") {
					files[filepath.ToSlash(rel)] = true
				}
			}
		}
		assert.LessOrEqual(t, len(files), maxACPSpawnFiles, "%s speaks ACP, yet spawn/ has these Go files for it: %v", id, files)
	}
	assert.Positive(t, acpAdapters, "no adapter speaks ACP alone, so nothing was checked")
}

// The check above finds what it looks for: a literal id and an agent
// constant outside an adapter's files are both seen.
func TestTheAdapterNameFinderSeesLiteralsAndConstants(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.go")
	require.NoError(t, os.WriteFile(path, []byte("package x\n\nimport \"github.com/card-dev/card/agent\"\n\n"+
		"var a = map[string]string{\"gemini\": \"\"}\n\nvar b = agent.Pi\n\n// claude-code in a comment is prose.\n"), 0o600))
	got := namedAdapters(t, path, adapterConstants(t))
	assert.Equal(t, map[string]bool{agent.Gemini: true, agent.Pi: true}, got)
}

// docTable is one table of the docs marked <!-- table:NAME -->: its rows
// by the adapter ids in their first cell.
type docTable struct {
	where string
	rows  map[string][]string
	dups  []string
}

var (
	tableMark  = regexp.MustCompile(`(?s)<!-- table:([a-z-]+) -->\n(.*?)<!-- /table -->`)
	tableCode  = regexp.MustCompile("`([^`]+)`")
	docsToScan = []string{filepath.Join(repo, "README.md"), "."}
)

// docTables finds every marked table in README.md and under docs/, wherever
// a page split puts it.
func docTables(t *testing.T) map[string][]docTable {
	t.Helper()
	var files []string
	for _, root := range docsToScan {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && (d.Name() == "node_modules" || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			if !d.IsDir() && strings.HasSuffix(path, ".md") {
				files = append(files, path)
			}
			return nil
		})
		require.NoError(t, err)
	}
	ids := agent.IDs()
	out := map[string][]docTable{}
	for _, path := range files {
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		for _, m := range tableMark.FindAllStringSubmatch(string(b), -1) {
			if m[1] == "request-fields" {
				continue // one column per adapter: requestFieldCells reads it
			}
			tab := docTable{where: path, rows: map[string][]string{}}
			lines := strings.Split(strings.TrimSpace(m[2]), "\n")
			require.Greater(t, len(lines), 2, "%s: table %s has a header, a rule and rows", path, m[1])
			for _, line := range lines[2:] {
				cells := strings.Split(strings.Trim(line, "| "), " | ")
				for _, c := range tableCode.FindAllStringSubmatch(cells[0], -1) {
					if !slices.Contains(ids, c[1]) {
						tab.dups = append(tab.dups, "unknown "+c[1])
						continue
					}
					if _, seen := tab.rows[c[1]]; seen {
						tab.dups = append(tab.dups, c[1])
					}
					tab.rows[c[1]] = cells
				}
			}
			out[m[1]] = append(out[m[1]], tab)
		}
	}
	return out
}

// The docs' per-adapter tables say what the code has: each marked table
// exists once, names every adapter once and no other, and its columns that
// restate an adapter's facts (id, name, binary, pin, read-only enforcement,
// images, the MCP refusal) match agent's and spawn's values.
func TestTheAgentTablesInTheDocsMatchTheAdapters(t *testing.T) {
	tables := docTables(t)
	checks := map[string]func(t *testing.T, a spawn.Adapter, cells []string){
		"agent-ids": func(t *testing.T, a spawn.Adapter, cells []string) {
			require.Len(t, cells, 6)
			assert.Equal(t, a.DisplayName, cells[1])
			assert.Equal(t, "`"+a.Binary+"`", cells[2])
			assert.Equal(t, "`"+a.PinEnv+"`", cells[4])
			assert.Equal(t, "`"+string(a.ReadOnly)+"`", cells[5])
		},
		"read-only-enforcement": func(t *testing.T, a spawn.Adapter, cells []string) {
			assert.Equal(t, "`"+string(a.ReadOnly)+"`", cells[1])
		},
		"images": func(t *testing.T, a spawn.Adapter, cells []string) {
			assert.Equal(t, strconv.FormatBool(a.Capabilities.Images), cells[1])
		},
		"mcp-handover": func(t *testing.T, a spawn.Adapter, cells []string) {
			assert.Equal(t, a.MCP.Refused != "", strings.HasPrefix(cells[1], "refused"), "refused in the docs exactly when the driver refuses: %s", cells[1])
		},
		"caps": func(t *testing.T, a spawn.Adapter, cells []string) {
			require.Len(t, cells, 3)
			assert.Equal(t, a.Caps.NoCost != "", strings.HasPrefix(cells[1], "refused"), "max_cost_usd refused in the docs exactly when the driver refuses it: %s", cells[1])
			assert.Equal(t, a.Caps.CostFlag == nil, strings.HasPrefix(cells[1], "refused") || strings.HasPrefix(cells[1], "card"), "the CLI's own cost cap in the docs exactly when the driver passes one: %s", cells[1])
			assert.Equal(t, a.Caps.NoTokens != "", strings.HasPrefix(cells[2], "refused"), "max_tokens refused in the docs exactly when the driver refuses it: %s", cells[2])
			if a.Caps.NoTokens == "" {
				when := map[string]string{spawn.TokensPerCall: "after each model call", spawn.TokensTurnEnd: "at the end of the turn"}[a.Caps.TokensWhen]
				assert.Contains(t, cells[2], when, "when the CLI reports its tokens")
			}
		},
		"live-grain":  func(*testing.T, spawn.Adapter, []string) {},
		"api-retries": func(*testing.T, spawn.Adapter, []string) {},
	}
	for name, check := range checks {
		t.Run(name, func(t *testing.T) {
			require.Len(t, tables[name], 1, "the table marked <!-- table:%s --> is in the docs once", name)
			tab := tables[name][0]
			assert.Empty(t, tab.dups, "%s: rows naming an adapter twice, or one card does not have", tab.where)
			for _, id := range agent.IDs() {
				cells, ok := tab.rows[id]
				if !assert.True(t, ok, "%s: table %s has no row for %s", tab.where, name, id) {
					continue
				}
				a, _ := spawn.Lookup(id)
				check(t, a, cells)
			}
		})
	}
	for name := range tables {
		assert.Contains(t, checks, name, "a table marked %s that this test does not know", name)
	}
}

// requestFieldCells reads the tables marked request-fields, one column per
// adapter (headed by its display name, or the start of it): the cell of
// each adapter in the row whose first cell starts with field.
func requestFieldCells(t *testing.T, field string) map[string]string {
	t.Helper()
	out := map[string]string{}
	var blocks []string
	for _, root := range docsToScan {
		_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() && (d.Name() == "node_modules" || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			if strings.HasSuffix(path, ".md") {
				b, _ := os.ReadFile(path)
				for _, m := range tableMark.FindAllStringSubmatch(string(b), -1) {
					if m[1] == "request-fields" {
						blocks = append(blocks, m[2])
					}
				}
			}
			return nil
		})
	}
	require.Len(t, blocks, 1, "the tables marked <!-- table:request-fields --> are in the docs once")
	split := func(line string) []string { return strings.Split(strings.Trim(line, "| "), " | ") }
	var columns []string
	for _, line := range strings.Split(blocks[0], "\n") {
		if !strings.HasPrefix(line, "|") || strings.HasPrefix(line, "| ---") {
			continue
		}
		cells := split(line)
		if cells[0] == "field" {
			columns = nil
			for _, h := range cells[1:] {
				id := ""
				for _, a := range agent.All() {
					if strings.HasPrefix(a.DisplayName, h) {
						id = a.ID
					}
				}
				require.NotEmpty(t, id, "request-fields: the column %q is no adapter's display name", h)
				columns = append(columns, id)
			}
			continue
		}
		if strings.HasPrefix(cells[0], "`"+field+"`") {
			require.Len(t, cells, len(columns)+1, line)
			for i, id := range columns {
				out[id] = cells[i+1]
			}
		}
	}
	return out
}

// The request-field tables say "refused" for a field exactly where the
// adapter's builder refuses it (in read_only, the mode the tables
// describe), for every adapter.
func TestTheRequestFieldTablesSayRefusedWhereTheBuilderRefuses(t *testing.T) {
	cwd := t.TempDir()
	for _, c := range []struct {
		field string
		set   func(*spawn.Request)
	}{
		{"effort", func(r *spawn.Request) { r.Effort = "high" }},
		{"max_turns", func(r *spawn.Request) { r.MaxTurns = 3 }},
		{"session_id", func(r *spawn.Request) { r.SessionID = "0199a3b2-7c1d-7e2f-8a3b-4c5d6e7f8091" }},
		{"resume", func(r *spawn.Request) { r.Resume = "0199a3b2-7c1d-7e2f-8a3b-4c5d6e7f8091" }},
		{"max_cost_usd", func(r *spawn.Request) { v := 1.5; r.MaxCostUSD = &v }},
		{"max_tokens", func(r *spawn.Request) { v := int64(5000); r.MaxTokens = &v }},
	} {
		t.Run(c.field, func(t *testing.T) {
			cells := requestFieldCells(t, c.field)
			for _, id := range agent.IDs() {
				cell, ok := cells[id]
				if !assert.True(t, ok, "request-fields: no %s cell for %s", c.field, id) {
					continue
				}
				// The daemon always names the directory for the session
				// files card keeps (Pi's).
				req := spawn.Request{Adapter: id, Mode: spawn.ModeReadOnly, Cwd: cwd, AgentSessionDir: cwd}
				c.set(&req)
				_, err := spawn.Build("/bin/x", req)
				var fe *api.FieldError
				refused := errors.As(err, &fe) && fe.Field == c.field
				assert.Equal(t, refused, strings.HasPrefix(cell, "refused"), "%s %s: the builder says %v, the docs %q", id, c.field, err, cell)
			}
		})
	}
}
