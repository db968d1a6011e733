package daemon_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/daemon/plan"
	"github.com/card-dev/card/internal/proc"
	"github.com/card-dev/card/internal/testskip"
	"github.com/card-dev/card/rpc/rpcclient"
)

// A run that writes (edit, bypass, and any mode but read_only) gets its
// cwd resolved, symlinks and ".." included, and is refused the filesystem's
// root, the user's home itself and the system's directories, with -32602
// naming cwd, the resolved path and the card.toml key. It is not a run: no
// row, no child. A read_only run may look anywhere, and a project's
// directory is fine, recorded as the path it resolved to.
func TestARunThatWritesIsRefusedTheRootTheHomeAndSystemDirsHoweverTheyAreNamed(t *testing.T) {
	home := t.TempDir()
	rd := startRunsDaemon(t, "allow_bypass = true\n", "HOME="+home)
	ctx := daemontest.Context(t)
	links := t.TempDir()
	require.NoError(t, os.Symlink("/", filepath.Join(links, "root")))
	require.NoError(t, os.Symlink(home, filepath.Join(links, "home")))
	require.NoError(t, os.Symlink("/etc", filepath.Join(links, "etc")))
	dotdot := rd.cwd + strings.Repeat("/..", strings.Count(rd.cwd, "/")+2)

	cases := []struct{ name, cwd, mode, resolved string }{
		{"the root", "/", "edit", "/"},
		{"a symlink to the root", filepath.Join(links, "root"), "edit", "/"},
		{"dot-dots up to the root", dotdot, "edit", "/"},
		{"the home itself", home, "edit", home},
		{"a symlink to the home", filepath.Join(links, "home"), "bypass", home},
		{"a system dir through a symlink", filepath.Join(links, "etc"), "edit", "/etc"},
		{"card's own home", rd.Home, "edit", rd.Home},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := rd.params("claude-code", "x")
			p.Cwd, p.PermissionMode = tc.cwd, tc.mode
			_, err := rd.Client.Invoke(ctx, p)
			re := rpcCode(t, err)
			assert.Equal(t, rpcclient.CodeInvalidParams, re.Code, re.Message)
			data := errData(t, re)
			assert.Equal(t, "cwd", data["field"])
			resolved, _ := filepath.EvalSymlinks(tc.resolved)
			assert.Equal(t, resolved, data["resolved"])
			assert.Equal(t, plan.AllowedEditDirsKey, data["config_key"])
			assert.Contains(t, re.Message, "permission_mode "+tc.mode)
		})
	}
	runs, err := rd.Client.Runs(ctx, api.ListParams{})
	require.NoError(t, err)
	assert.Empty(t, runs, "a refused cwd is not a run")
	started, _ := filepath.Glob(filepath.Join(rd.agents["claude-code"].Dir, "env-*"))
	assert.Empty(t, started, "a refused cwd started the agent")

	// read_only may run at the root; a project through a symlink runs
	// where the link points, and records that.
	p := rd.params("claude-code", "look around")
	p.Cwd = "/"
	res := rd.finished(t, p)
	assert.False(t, res.IsError)
	require.NoError(t, os.Symlink(rd.cwd, filepath.Join(links, "project")))
	p = rd.params("claude-code", "edit the project")
	p.Cwd, p.PermissionMode = filepath.Join(links, "project"), "edit"
	res = rd.finished(t, p)
	assert.False(t, res.IsError)
	run, err := rd.Client.Run(ctx, res.RunID)
	require.NoError(t, err)
	want, _ := filepath.EvalSymlinks(rd.cwd)
	assert.Equal(t, want, run.Cwd, "the run records the directory it ran in")
	assert.Equal(t, want, rd.agents["claude-code"].ChildEnv(t, res.RunID)["PWD"], "the agent ran in the resolved directory")
}

// allowed_edit_dirs lets an operator's own choice through, and a typo in it
// stops the daemon at startup instead of allowing nothing silently.
func TestAllowedEditDirsLetsTheOperatorsChoiceThrough(t *testing.T) {
	home := t.TempDir()
	rd := startRunsDaemon(t, "allowed_edit_dirs = ["+strconv.Quote(home)+"]\n", "HOME="+home)
	p := rd.params("claude-code", "tidy my dotfiles")
	p.Cwd, p.PermissionMode = home, "edit"
	res := rd.finished(t, p)
	assert.False(t, res.IsError)

	cardHome := filepath.Join(t.TempDir(), "card")
	require.NoError(t, os.MkdirAll(cardHome, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(cardHome, daemon.ConfigFileName), []byte(`allowed_edit_dirs = ["/no/such/dir"]`), 0o600))
	_, err := daemon.New(daemon.Options{Home: cardHome, Environ: []string{"HOME=" + home}, Logger: zap.NewNop()})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `allowed_edit_dirs in card.toml: "/no/such/dir"`)
	_, err = daemon.ParseConfig("card.toml", `allowed_edit_dirs = ["relative/dir"]`)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not an absolute path")
}

// Over the wire: an edit or ask run is refused each place an agent's
// settings, another program's credentials or a command on the agents' PATH
// live, by the rule data.rule names and with the card.toml key to
// override it; allowed_edit_dirs naming one of them lets that one through,
// and a project under the home still runs.
func TestAWritingRunIsRefusedTheHomesDotDirsAndTheAgentsPath(t *testing.T) {
	home := t.TempDir()
	tools := t.TempDir()
	for _, d := range []string{".claude", ".codex", ".gemini", ".pi/agent/extensions", ".config/foo", ".docker", "bin", "src/project"} {
		require.NoError(t, os.MkdirAll(filepath.Join(home, d), 0o755))
	}
	require.NoError(t, os.MkdirAll(filepath.Join(tools, "bin", "sub"), 0o755))
	allowed := filepath.Join(home, ".docker")
	rd := startRunsDaemon(t, "allowed_edit_dirs = ["+strconv.Quote(allowed)+"]\n",
		"HOME="+home, "PATH="+filepath.Join(home, "bin")+":"+filepath.Join(tools, "bin")+":/usr/bin:/bin")
	ctx := daemontest.Context(t)
	links := t.TempDir()
	require.NoError(t, os.Symlink(filepath.Join(home, ".claude"), filepath.Join(links, "claude")))

	cases := []struct{ name, cwd, mode, resolved, rule string }{
		{"Claude Code's settings", filepath.Join(home, ".claude"), "edit", filepath.Join(home, ".claude"), "home_dot_dir"},
		{"a symlink to them", filepath.Join(links, "claude"), "ask", filepath.Join(home, ".claude"), "home_dot_dir"},
		{"Codex's, with a trailing slash", filepath.Join(home, ".codex") + "/", "edit", filepath.Join(home, ".codex"), "home_dot_dir"},
		{"Gemini's, through ..", filepath.Join(home, "src", "..", ".gemini"), "edit", filepath.Join(home, ".gemini"), "home_dot_dir"},
		{"Pi's extensions", filepath.Join(home, ".pi", "agent", "extensions"), "edit", filepath.Join(home, ".pi", "agent", "extensions"), "home_dot_dir"},
		{"a dir deep in ~/.config", filepath.Join(home, ".config", "foo"), "bypass", filepath.Join(home, ".config", "foo"), "home_dot_dir"},
		{"~/bin on PATH", filepath.Join(home, "bin"), "edit", filepath.Join(home, "bin"), "agent_path"},
		{"below a PATH dir", filepath.Join(tools, "bin", "sub"), "edit", filepath.Join(tools, "bin", "sub"), "agent_path"},
		{"a dir holding one", tools, "edit", tools, "agent_path"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := rd.params("claude-code", "x")
			p.Cwd, p.PermissionMode = tc.cwd, tc.mode
			if tc.mode == "bypass" {
				p.ID = "codex"
			}
			_, err := rd.Client.Invoke(ctx, p)
			re := rpcCode(t, err)
			assert.Equal(t, rpcclient.CodeInvalidParams, re.Code, re.Message)
			data := errData(t, re)
			resolved, _ := filepath.EvalSymlinks(tc.resolved)
			assert.Equal(t, map[string]any{"field": "cwd", "resolved": resolved, "rule": tc.rule, "config_key": plan.AllowedEditDirsKey}, data)
			assert.Contains(t, re.Message, "allowed_edit_dirs in card.toml")
		})
	}
	runs, err := rd.Client.Runs(ctx, api.ListParams{})
	require.NoError(t, err)
	assert.Empty(t, runs, "a refused cwd is not a run")

	for _, dir := range []string{allowed, filepath.Join(home, "src", "project")} {
		p := rd.params("claude-code", "edit here")
		p.Cwd, p.PermissionMode = dir, "edit"
		res := rd.finished(t, p)
		assert.False(t, res.IsError, dir)
	}
}

// A daemon running as root could write every account's files: another
// user's home (as the passwd database lists it) is refused to a writing
// run, inside it and through a symlink too, while the accounts whose home
// is "/" refuse nothing more and a project elsewhere runs.
func TestARootDaemonRefusesAWritingRunInAnotherUsersHome(t *testing.T) {
	if os.Geteuid() != 0 {
		testskip.Skip(t, testskip.Gap{Why: "only a daemon running as root refuses other users' homes", Enable: "run as root"},
			"!!! needs root: the rule applies to a root daemon only")
	}
	users := t.TempDir()
	bob := filepath.Join(users, "bob")
	require.NoError(t, os.MkdirAll(filepath.Join(bob, "src", "app"), 0o755))
	passwd := filepath.Join(t.TempDir(), "passwd")
	require.NoError(t, os.WriteFile(passwd, []byte("root:x:0:0:root:/root:/bin/bash\n"+
		"bob:x:4242:4242:Bob:"+bob+":/bin/sh\nsystemd-network:x:998:998::/:/usr/sbin/nologin\n"), 0o644))
	daemon.UsePasswdFile(t, passwd)
	rd := startRunsDaemon(t, "")
	ctx := daemontest.Context(t)
	link := filepath.Join(t.TempDir(), "bob")
	require.NoError(t, os.Symlink(bob, link))
	for _, cwd := range []string{bob, filepath.Join(bob, "src", "app"), link, users} {
		p := rd.params("claude-code", "x")
		p.Cwd, p.PermissionMode = cwd, "edit"
		_, err := rd.Client.Invoke(ctx, p)
		re := rpcCode(t, err)
		assert.Equal(t, rpcclient.CodeInvalidParams, re.Code, re.Message)
		assert.Equal(t, "other_user_home", errData(t, re)["rule"], re.Message)
	}
	p := rd.params("claude-code", "edit the project")
	p.PermissionMode = "edit"
	assert.False(t, rd.finished(t, p).IsError, "a project outside every home runs")
}

// A run that writes is refused an agent's own install directory, which is
// not on PATH when card.toml pins the binary with bin = or when a link on
// PATH points into an npm package: the directory of the binary card runs,
// that of the file it resolves to, and the node_modules its package is in
// (or a directory holding them), each through links; any adapter's, not
// only the run's. allowed_edit_dirs still lets the operator's choice
// through, and a project elsewhere runs.
func TestAWritingRunIsRefusedWhereAnAgentIsInstalled(t *testing.T) {
	tools := t.TempDir()
	pkg := filepath.Join(tools, "node_modules", "@openai", "codex")
	for _, d := range []string{filepath.Join(pkg, "bin"), filepath.Join(tools, "node_modules", ".bin"), filepath.Join(tools, "node_modules", "@openai", "codex-linux-x64")} {
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	require.NoError(t, proc.WriteExecutable(filepath.Join(pkg, "bin", "codex.js"), []byte("#!/bin/sh\necho codex-cli 0.171.0\n")))
	link := filepath.Join(tools, "node_modules", ".bin", "codex")
	require.NoError(t, os.Symlink("../@openai/codex/bin/codex.js", link))
	links := t.TempDir()
	require.NoError(t, os.Symlink(pkg, filepath.Join(links, "pkg")))
	allowed := filepath.Join(tools, "node_modules", "@openai", "codex-linux-x64")
	rd := startRunsDaemon(t, fmt.Sprintf("allowed_edit_dirs = [%q]\n\n[adapters.codex]\nbin = %q\n", allowed, link))
	ctx := daemontest.Context(t)

	cases := []struct{ name, cwd, resolved string }{
		{"the package the pinned link points into", pkg, pkg},
		{"the directory of the file it resolves to", filepath.Join(pkg, "bin"), filepath.Join(pkg, "bin")},
		{"the pinned binary's own directory", filepath.Join(tools, "node_modules", ".bin"), filepath.Join(tools, "node_modules", ".bin")},
		{"the package through a symlink", filepath.Join(links, "pkg"), pkg},
		{"the node_modules holding it", filepath.Join(tools, "node_modules"), filepath.Join(tools, "node_modules")},
		{"a directory holding the install", tools, tools},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// A Claude Code run: every adapter's install counts.
			p := rd.params("claude-code", "x")
			p.Cwd, p.PermissionMode = tc.cwd, "edit"
			_, err := rd.Client.Invoke(ctx, p)
			re := rpcCode(t, err)
			assert.Equal(t, rpcclient.CodeInvalidParams, re.Code, re.Message)
			resolved, _ := filepath.EvalSymlinks(tc.resolved)
			assert.Equal(t, map[string]any{"field": "cwd", "resolved": resolved, "rule": "agent_install", "config_key": plan.AllowedEditDirsKey}, errData(t, re))
			assert.Contains(t, re.Message, "where codex is installed")
		})
	}
	runs, err := rd.Client.Runs(ctx, api.ListParams{})
	require.NoError(t, err)
	assert.Empty(t, runs, "a refused cwd is not a run")
	for _, dir := range []string{allowed, rd.cwd} {
		p := rd.params("claude-code", "edit here")
		p.Cwd, p.PermissionMode = dir, "edit"
		assert.False(t, rd.finished(t, p).IsError, dir)
	}
}
