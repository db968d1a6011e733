package docs

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// goish tells a description copied from a Go doc comment ("ID is the
// adapter…", "IncludeHealth adds…"): its first word is the Go field's name
// or another Go identifier, which means nothing to a client in TypeScript.
func goish(param, desc string) bool {
	first, _, _ := strings.Cut(desc, " ")
	first = strings.Trim(first, "`.,:;")
	if strings.EqualFold(first, strings.ReplaceAll(param, "_", "")) && first != strings.ToLower(first) {
		return true
	}
	return regexp.MustCompile(`^[A-Z][a-z0-9]+[A-Z][A-Za-z0-9]*$`).MatchString(first)
}

func TestGoishDescriptionsAreTold(t *testing.T) {
	for _, c := range []struct {
		param, desc string
		want        bool
	}{
		{"id", "ID is the adapter to run.", true},
		{"include_health", "IncludeHealth adds each adapter's health.", true},
		{"cwd", "Cwd is where the agent runs.", true},
		{"status", "Status and Result are set on the terminal event only.", true},
		{"after_seq", "AfterSeq replays only events after it.", true},
		{"timeout_secs", "TimeoutSecs defaults to 300.", true},
		{"id", "The adapter to run.", false},
		{"summary", "One line for a person.", false},
		{"stream", "Stream answers at once with the run id.", true},
	} {
		assert.Equal(t, c.want, goish(c.param, c.desc), "%s: %q", c.param, c.desc)
	}
}

type discoveredParams struct {
	Methods []struct {
		Name   string `json:"name"`
		Params []struct {
			Name        string `json:"name"`
			Description string `json:"description"`
		} `json:"params"`
	} `json:"methods"`
	ServerRequests []struct {
		Name   string `json:"name"`
		Params []struct {
			Name        string `json:"name"`
			Description string `json:"description"`
		} `json:"params"`
	} `json:"x-server-requests"`
	Notifications []struct {
		Name   string `json:"name"`
		Params []struct {
			Name        string `json:"name"`
			Description string `json:"description"`
		} `json:"params"`
	} `json:"x-notifications"`
}

// The published OpenRPC document is what a client (and the TypeScript
// client generated from it) reads: every param says what it does.
func TestEveryParamRPCDiscoverPublishesSaysWhatItDoesForAClient(t *testing.T) {
	var doc discoveredParams
	discoverInto(t, &doc)
	check := func(kind, method, param, desc string) {
		if strings.TrimSpace(desc) == "" {
			t.Errorf("%s %s: param %s has no description (add it to daemon/params_doc.go)", kind, method, param)
		} else if goish(param, desc) {
			t.Errorf("%s %s: param %s reads like a Go comment: %q", kind, method, param, desc)
		}
	}
	n := 0
	for _, m := range doc.Methods {
		for _, p := range m.Params {
			check("method", m.Name, p.Name, p.Description)
			n++
		}
	}
	for _, q := range doc.ServerRequests {
		for _, p := range q.Params {
			check("server request", q.Name, p.Name, p.Description)
			n++
		}
	}
	for _, q := range doc.Notifications {
		for _, p := range q.Params {
			check("notification", q.Name, p.Name, p.Description)
			n++
		}
	}
	assert.Greater(t, n, 50)
}

var (
	methodHeadingRE = regexp.MustCompile("^#{1,6} .*`([a-z_$]+\\.[a-z_.]+)`")
	paramRowRE      = regexp.MustCompile("^\\| `([a-z_0-9]+)` \\| ([^|]*) \\| (yes|no) \\| (.*?) ?\\|$")
)

// paramRows finds each method's **Params** table rows in a page: the
// method is the nearest heading above that names one.
func paramRows(text string, visit func(i int, method, param, desc string, line string)) {
	method, inParams := "", false
	for i, l := range strings.Split(text, "\n") {
		if m := methodHeadingRE.FindStringSubmatch(l); m != nil {
			method, inParams = m[1], false
			continue
		}
		if strings.HasPrefix(l, "**Params**") || strings.HasPrefix(l, "| field | type | always present | description |") {
			inParams = true
			continue
		}
		if inParams && strings.HasPrefix(l, "**") {
			inParams = false
		}
		if m := paramRowRE.FindStringSubmatch(l); m != nil && inParams {
			visit(i, method, m[1], strings.TrimSpace(m[4]), l)
		}
	}
}

// The params tables show what rpc.discover publishes, so the two cannot
// drift. CARD_DOCS_UPDATE_PARAMS=1 rewrites the tables' description column
// from the registry instead of checking it.
func TestTheParamsTablesShowTheDescriptionsRPCDiscoverPublishes(t *testing.T) {
	var doc discoveredParams
	reg := discoverInto(t, &doc)
	update := os.Getenv("CARD_DOCS_UPDATE_PARAMS") != ""
	rows := 0
	tabled := map[string]bool{}
	for _, f := range protocolPages(t) {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		lines := strings.Split(string(b), "\n")
		changed := false
		paramRows(string(b), func(i int, method, param, desc, l string) {
			rows++
			if method == "" {
				t.Errorf("docs/%s:%d: a params table under no heading that names its method", f, i+1)
				return
			}
			tabled[method] = true
			want := reg.ParamDoc(method, param)
			if update && want != "" && desc != want {
				lines[i] = l[:strings.LastIndex(strings.TrimSuffix(l, "|"), "|")+1] + " " + want + " |"
				changed = true
				return
			}
			assert.Equal(t, want, desc, "docs/%s:%d: %s's param %s", f, i+1, method, param)
		})
		if changed {
			require.NoError(t, os.WriteFile(f, []byte(strings.Join(lines, "\n")), 0o644))
		}
	}
	assert.Greater(t, rows, 50, "the params tables were found")
	for _, m := range doc.Methods {
		if len(m.Params) > 0 {
			assert.True(t, tabled[m.Name], "no params table of %s was found under its heading", m.Name)
		}
	}
}
