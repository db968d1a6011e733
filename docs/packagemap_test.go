package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const module = "github.com/card-dev/card"

// testKits are packages that exist only for tests but whose names do not
// say so: the skip recorder every test package uses, and the Claude Code
// stand-in tests build and run as a child.
var testKits = []string{"internal/testskip", "internal/fakeclaude"}

// isProduct says whether a package of the module (its path inside the
// module) is part of the product, and so needs a row in the README's map.
// Everything is, except:
//   - docs and anything under it: the docs' own tests;
//   - anything under e2e: end-to-end tests, soaks and their stand-ins;
//   - a package with a path element named test, or whose last element ends
//     in "test" (daemon/daemontest, substrate/internal/bridgetest,
//     clients/typescript/test/fakeclaude): harnesses for tests, as
//     net/http/httptest is;
//   - the test kits named in testKits.
//
// The rule is by name, so a package that is added and not yet imported by
// anything counts at once. A name cannot hide product code: the test below
// also fails when the card binary is built from a package the rule leaves
// out.
func isProduct(rel string) bool {
	if rel == "docs" || strings.HasPrefix(rel, "docs/") || rel == "e2e" || strings.HasPrefix(rel, "e2e/") {
		return false
	}
	elems := strings.Split(rel, "/")
	if slices.Contains(elems, "test") || strings.HasSuffix(elems[len(elems)-1], "test") {
		return false
	}
	return !slices.Contains(testKits, rel)
}

// goList is `go list` run from the module's root with args, as paths
// inside the module (the root itself as ".").
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = repo
	out, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); ok {
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, ee.Stderr)
	}
	require.NoError(t, err, "go list %s", strings.Join(args, " "))
	var rels []string
	for _, p := range strings.Fields(string(out)) {
		if p == module {
			rels = append(rels, ".")
		} else if rel, ok := strings.CutPrefix(p, module+"/"); ok {
			rels = append(rels, rel)
		}
	}
	return rels
}

var mapPathRE = regexp.MustCompile("`([^`]+)`")

// readmeMap is the paths named in the first column of the README's table
// under "How it is built", without their trailing slash.
func readmeMap(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo, "README.md"))
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(b), "\n## How it is built\n")
	require.True(t, ok, "README.md has a section \"How it is built\"")
	var paths []string
	inTable := false
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "|") {
			if inTable {
				break
			}
			continue
		}
		inTable = true
		cells := strings.Split(line, "|")
		if len(cells) < 3 {
			continue
		}
		for _, m := range mapPathRE.FindAllStringSubmatch(cells[1], -1) {
			paths = append(paths, strings.TrimSuffix(m[1], "/"))
		}
	}
	require.Greater(t, len(paths), 10, "the README's package map was not found under \"How it is built\"")
	return paths
}

// A reader finds where something lives from the README's map; a package
// it leaves out is code nobody is told about.
func TestTheREADMEsPackageMapNamesEveryProductPackage(t *testing.T) {
	named := readmeMap(t)
	var missing []string
	product := 0
	for _, rel := range goList(t, "./...") {
		if !isProduct(rel) {
			continue
		}
		product++
		if !slices.Contains(named, rel) {
			missing = append(missing, rel+"/")
		}
	}
	require.Greater(t, product, 15, "go list ./... found the product's packages")
	assert.Empty(t, missing, "packages with no row in README.md's table under \"How it is built\": add one saying what each owns")
}

// The rule above leaves test harnesses out by their names: no package the
// card binary is built from may be one of them.
func TestTheCardBinaryIsBuiltFromProductPackagesOnly(t *testing.T) {
	deps := goList(t, "-deps", "./cmd/card")
	require.Contains(t, deps, "cmd/card")
	for _, rel := range deps {
		assert.True(t, isProduct(rel), "card is built from %s, which the package map's rule takes for a test harness; rename it or change the rule", rel)
	}
}

// A row for a directory that was moved or deleted sends a reader nowhere.
func TestEveryPathTheREADMEsPackageMapNamesExists(t *testing.T) {
	for _, rel := range readmeMap(t) {
		st, err := os.Stat(filepath.Join(repo, rel))
		if assert.NoError(t, err, "README.md's package map names %s/", rel) {
			assert.True(t, st.IsDir(), "README.md's package map names %s/, which is not a directory", rel)
		}
	}
}

func TestThePackageMapsRuleTellsProductFromTestHarnesses(t *testing.T) {
	for rel, want := range map[string]bool{
		"daemon":                             true,
		"daemon/plan":                        true,
		"acp/agentside":                      true,
		"cmd/card":                           true,
		"internal/home":                      true,
		"daemon/daemontest":                  false,
		"substrate/internal/bridgetest":      false,
		"clients/typescript/test/fakeclaude": false,
		"internal/testskip":                  false,
		"internal/fakeclaude":                false,
		"e2e/soak":                           false,
		"docs":                               false,
	} {
		assert.Equal(t, want, isProduct(rel), rel)
	}
}
