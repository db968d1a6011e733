package plan

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The policy over resolved paths, without a filesystem: what a run that
// writes may use as its cwd, and what the operator's allowed dirs change.
func TestTheCwdPolicyRefusesTheRootHomesAndSystemDirsButNotAProject(t *testing.T) {
	p := CwdPolicy{Home: "/home/u", CardHome: "/home/u/.local/state/card"}
	allowed := CwdPolicy{Home: "/home/u", CardHome: "/home/u/.local/state/card", Allowed: []string{"/etc/nginx", "/home/u"}}
	cases := []struct {
		dir, why   string
		allowedWhy string // with allowed; "-" means the same as why
	}{
		{"/", "the root of the filesystem", "-"},
		{"/home/u", "your home directory itself", ""},
		{"/home", "holds card's own home", "-"},
		{"/Users", "/Users itself", "-"},
		{"/home/u/src/app", "", ""},
		{"/home/u/.ssh", "inside /home/u/.ssh: every directory directly under your home whose name begins with a dot", ""},
		{"/home/u/.config/systemd/user", "inside /home/u/.config: every directory", ""},
		{"/home/u/Library/LaunchAgents", "inside /home/u/Library, where login items live", ""},
		{"/home/u/.local", "holds card's own home", ""},
		{"/home/u/.local/state/card", "card's own home", "-"},
		{"/home/u/.local/state/card/sub", "card's own home", "-"},
		{"/etc", "inside /etc", "-"},
		{"/etc/nginx", "inside /etc", ""},
		{"/etc/nginx/sites", "inside /etc", ""},
		{"/usr/local/src/x", "inside /usr", "-"},
		{"/var", "/var itself", "-"},
		{"/var/www/site", "", ""},
		{"/var/lib/docker", "inside /var/lib", "-"},
		{"/tmp", "/tmp itself", "-"},
		{"/tmp/build", "", ""},
		{"/opt", "/opt itself", "-"},
		{"/opt/project", "", ""},
		{"/opt/homebrew/bin", "inside /opt/homebrew", "-"},
		{"/private/var/folders/x/T/proj", "", ""},
		{"/System/Library", "inside /System", "-"},
		{"/etcetera", "", ""},
		{"/home/u/src/.hidden", "", ""}, // a dot dir of a project is the project's
	}
	for _, c := range cases {
		_, got := p.refusal(c.dir, false)
		if c.why == "" {
			assert.Empty(t, got, c.dir)
		} else {
			assert.Contains(t, got, c.why, c.dir)
		}
		want := c.allowedWhy
		if want == "-" {
			want = c.why
		}
		_, got = allowed.refusal(c.dir, false)
		if want == "" {
			assert.Empty(t, got, "%s with allowed dirs", c.dir)
		} else {
			assert.Contains(t, got, want, "%s with allowed dirs", c.dir)
		}
	}
}

// Every directory a person's tools load from or keep secrets in, however
// it is spelled: each dot directory directly under the home (the agents'
// own settings, whose hooks and MCP commands run in the user's next
// session, and the credentials of docker, kube and npm), every directory on
// the agents' PATH (and whatever holds one), and another user's home.
// Each is refused through its plain name, a trailing slash, a ".." and a
// symlink, by the rule the error names; allowed_edit_dirs naming it lets
// it through; a project under the home stays a fine cwd.
func TestEveryDotDirPathDirAndOtherUsersHomeIsRefusedHoweverNamed(t *testing.T) {
	root := t.TempDir()
	home := filepath.Join(root, "home", "me")
	other := filepath.Join(root, "home", "bob")
	tools := filepath.Join(root, "tools")
	cardHome := filepath.Join(home, ".local", "state", "card")
	dirs := map[string]string{ // relative to root → rule
		"home/me/.claude":                 ruleHomeDotDir,
		"home/me/.gemini":                 ruleHomeDotDir,
		"home/me/.codex":                  ruleHomeDotDir,
		"home/me/.pi/agent/extensions":    ruleHomeDotDir,
		"home/me/.factory":                ruleHomeDotDir,
		"home/me/.cargo/bin":              ruleHomeDotDir,
		"home/me/.pyenv/shims":            ruleHomeDotDir,
		"home/me/.docker":                 ruleHomeDotDir,
		"home/me/.kube":                   ruleHomeDotDir,
		"home/me/.vscode/extensions":      ruleHomeDotDir,
		"home/me/.npm":                    ruleHomeDotDir,
		"home/me/.config/foo":             ruleHomeDotDir,
		"home/me/.SSH":                    ruleHomeDotDir,
		"home/me/bin":                     ruleAgentPath,
		"home/me/go/bin":                  ruleAgentPath,
		"home/me/go/bin/sub":              ruleAgentPath,
		"home/me/go":                      ruleAgentPath, // holds a PATH dir
		"tools/bin":                       ruleAgentPath,
		"home/bob":                        ruleOtherHome,
		"home/bob/src/app":                ruleOtherHome,
		"home/me/.local/state/card/stuff": ruleCardHome,
	}
	for d := range dirs {
		require.NoError(t, os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	project := filepath.Join(home, "src", "project")
	require.NoError(t, os.MkdirAll(project, 0o755))
	links := filepath.Join(root, "links")
	require.NoError(t, os.MkdirAll(links, 0o755))
	path := []string{filepath.Join(home, "bin"), filepath.Join(home, "go", "bin"), filepath.Join(home, ".cargo", "bin"),
		filepath.Join(tools, "link-to-bin"), "relative/bin", "/", home}
	require.NoError(t, os.Symlink(filepath.Join(tools, "bin"), path[3]))
	passwd := "me:x:1000:1000::" + home + ":/bin/sh\nbob:x:1001:1001::" + other + ":/bin/sh\nsvc:x:998:998::/:/usr/sbin/nologin\n"

	policy := func(allowed ...string) CwdPolicy {
		p, err := NewCwdPolicy(allowed, home, cardHome, otherUsersHomes(passwd, 1000))
		require.NoError(t, err)
		return p.withPath(path)
	}
	base := policy()
	for rel, rule := range dirs {
		dir := filepath.Join(root, rel)
		link := filepath.Join(links, strings.ReplaceAll(rel, "/", "_"))
		require.NoError(t, os.Symlink(dir, link))
		spellings := []string{dir, dir + "/", filepath.Dir(dir) + "/../" + filepath.Base(filepath.Dir(dir)) + "/" + filepath.Base(dir), link}
		for _, s := range spellings {
			_, gotRule, why, err := base.judge(osPaths{}, s)
			require.NoError(t, err, s)
			assert.Equal(t, rule, gotRule, "%s: %s", s, why)
		}
		_, gotRule, why, err := policy(dir).judge(osPaths{}, link)
		require.NoError(t, err)
		if rule == ruleCardHome {
			assert.Equal(t, ruleCardHome, gotRule, "card's own home yields to nothing")
		} else {
			assert.Empty(t, why, "%s named in allowed_edit_dirs", rel)
		}
	}
	for _, s := range []string{project, project + "/", filepath.Join(links, "..", "home", "me", "src", "project")} {
		_, rule, why, err := base.judge(osPaths{}, s)
		require.NoError(t, err)
		assert.Empty(t, rule+why, "a project under the home is a fine cwd: %s", s)
	}
	assert.Equal(t, []string{other}, base.OtherHomes, "the user's own home and / are not another user's")
	assert.NotContains(t, base.Path, "/", "a PATH entry of / would refuse everything")
	assert.NotContains(t, base.Path, home)
}

// A case-insensitive volume, as macOS has by default, modelled on a
// machine that has none: names in another case are the same directory, so
// every rule holds for them, allowed_edit_dirs too.
func TestOnACaseInsensitiveVolumeEveryRuleHoldsInAnyCase(t *testing.T) {
	p := CwdPolicy{
		Home:       "/Users/u",
		CardHome:   "/Users/u/Library/Application Support/card",
		Allowed:    []string{"/opt/Work", "/Users/u/Library/Application Support/card"},
		Path:       []string{"/Users/u/bin", "/usr/local/bin"},
		OtherHomes: []string{"/Users/bob"},
		Installs:   []installDir{{Dir: "/Users/u/tools/node_modules", Adapter: "codex"}},
	}
	cases := []struct{ dir, rule string }{
		{"/Users/u/.SSH", ruleHomeDotDir},
		{"/users/u/TOOLS/Node_Modules/@openai/codex", ruleAgentInstall},
		{"/Users/u/Tools", ruleAgentInstall},
		{"/users/U/.Claude/hooks", ruleHomeDotDir},
		{"/Users/u/library/LaunchAgents", ruleHomeTree},
		{"/USR/local/bin", ruleAgentPath},
		{"/usr/LOCAL/lib", ruleSystem},
		{"/Users/u/BIN", ruleAgentPath},
		{"/users/u", ruleHome},
		{"/USERS", ruleHoldsCardHome},
		{"/users/u/LIBRARY/application support/CARD/x", ruleCardHome},
		{"/users/BOB/src", ruleOtherHome},
		{"/TMP", ruleContainer},
		{"/OPT/work/site", ""},
		{"/Users/u/src/App", ""},
	}
	for _, c := range cases {
		for _, m := range []pathModel{foldingModel{}} {
			_, rule, why, err := p.judge(m, c.dir)
			require.NoError(t, err)
			assert.Equal(t, c.rule, rule, "%s: %s", c.dir, why)
		}
	}
	// The same names on a volume that tells case apart are other
	// directories (where they exist at all).
	for _, dir := range []string{"/USR/local/bin", "/users/BOB/src", "/Users/u/library/LaunchAgents"} {
		rule, _ := p.refusal(dir, false)
		assert.Empty(t, rule, dir)
	}
}

// foldingModel is a volume that finds names whatever their case; paths
// resolve to themselves.
type foldingModel struct{}

func (foldingModel) resolve(dir string) (string, error) { return filepath.Clean(dir), nil }
func (foldingModel) foldsCase(string) bool              { return true }

// The real file system here tells case apart, and says so; the probe is
// what a macOS volume answers true to.
func TestTheFileSystemSaysWhetherItFoldsCase(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "Proj")
	require.NoError(t, os.Mkdir(dir, 0o755))
	upper := filepath.Join(filepath.Dir(dir), "pROJ")
	require.NoError(t, os.Mkdir(upper, 0o755))
	assert.False(t, osPaths{}.foldsCase(dir), "two directories that differ in case are two")
	assert.False(t, osPaths{}.foldsCase("/"), "a name without letters has nothing to fold")
}

// The passwd database's other accounts, each with its home; the daemon's
// own uid and malformed lines are no one's.
func TestOtherUsersHomesComeFromThePasswdFile(t *testing.T) {
	passwd := "root:x:0:0:root:/root:/bin/bash\n# comment\nbroken line\nme:x:1000:1000::/home/me:/bin/sh\n" +
		"bob:x:1001:1001:Bob:/home/bob/:/bin/sh\nweird:x:1002:1002::relative:/bin/sh\n"
	assert.Equal(t, []string{"/root", "/home/bob"}, otherUsersHomes(passwd, 1000))
	assert.Equal(t, []string{"/home/me", "/home/bob"}, otherUsersHomes(passwd, 0))
}
