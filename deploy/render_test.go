package deploy

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"howett.net/plist"

	"github.com/card-dev/card/internal/testskip"
)

// requireTool finds an external validator. Missing, it skips loudly on a laptop but fails in CI
// (CARD_E2E_REQUIRED=1), so a CI image that lost the package cannot turn the check green by skipping.
func requireTool(t *testing.T, name, debianPackage string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	testskip.Skip(t, testskip.Gap{
		Why:     name + " not installed",
		Enable:  "apt-get install -y " + debianPackage,
		Install: true,
	}, "!!! "+name+" is not installed, so this check did NOT run")
	return ""
}

// runTool runs a validator with a deadline and returns its combined output.
func runTool(t *testing.T, env []string, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// fakeBinary creates an executable at dir/rel, because systemd-analyze verify checks that
// ExecStart names an executable that exists.
func fakeBinary(t *testing.T, dir, rel string) string {
	t.Helper()
	p := filepath.Join(dir, rel)
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, []byte("#!/bin/sh\nexit 0\n"), 0o755))
	return p
}

func linuxTarget(bin, home string) Target {
	return Target{GOOS: "linux", Binary: bin, Home: home, CardHome: filepath.Join(home, ".local/state/card"), UID: 1000,
		PATH: []string{filepath.Join(home, ".nvm/versions/node/v22.11.0/bin"), "/usr/bin"}}
}

// verifyUnit runs systemd-analyze verify in system mode and, with a private runtime dir, in user
// mode; any diagnostic at all (unknown key, bad quoting, missing binary) fails, since systemd
// reports unknown keys with exit status 0.
func verifyUnit(t *testing.T, unit []byte) {
	t.Helper()
	analyze := requireTool(t, "systemd-analyze", "systemd")
	dir := t.TempDir()
	path := filepath.Join(dir, UnitName)
	require.NoError(t, os.WriteFile(path, unit, 0o644))
	out, err := runTool(t, nil, analyze, "verify", path)
	require.NoError(t, err, "system-mode verify: %s", out)
	assert.Empty(t, strings.TrimSpace(out), "system-mode verify must print nothing")

	// User mode also loads the machine's own user units (gpg-agent sockets and the like), whose
	// complaints are not ours: only lines about card.service count there.
	runtime, err := os.MkdirTemp("", "rt")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(runtime) })
	out, err = runTool(t, []string{"XDG_RUNTIME_DIR=" + runtime}, analyze, "--user", "verify", path)
	require.NoError(t, err, "user-mode verify: %s", out)
	for _, line := range strings.Split(out, "\n") {
		assert.NotContains(t, line, UnitName, "user-mode verify complained about the unit")
	}
}

func TestRenderedUnitPassesSystemdAnalyzeVerify(t *testing.T) {
	dir := t.TempDir()
	unit, err := RenderUnit(linuxTarget(fakeBinary(t, dir, "bin/card"), dir))
	require.NoError(t, err)
	verifyUnit(t, unit)
}

func TestUnitForABinaryInAnAwkwardPathStillVerifiesAndRunsThatPath(t *testing.T) {
	// Spaces, a specifier (%h is the home directory) and a dollar (variable expansion in
	// arguments) would each break an unquoted ExecStart or point it at another file.
	dir := t.TempDir()
	bin := fakeBinary(t, dir, `My Apps/100%h card/$HOME/card`)
	target := linuxTarget(bin, dir)
	target.CardHome = filepath.Join(dir, `state dir/50% "$USER"\card`)
	unit, err := RenderUnit(target)
	require.NoError(t, err)
	verifyUnit(t, unit)

	// Break the quoting on purpose: verify must notice, or the test above proves nothing.
	broken := bytes.Replace(unit, []byte(`100%%h`), []byte(`100%h`), 1)
	require.NotEqual(t, unit, broken)
	analyze := requireTool(t, "systemd-analyze", "systemd")
	path := filepath.Join(t.TempDir(), UnitName)
	require.NoError(t, os.WriteFile(path, broken, 0o644))
	out, err := runTool(t, nil, analyze, "verify", path)
	assert.True(t, err != nil || strings.TrimSpace(out) != "", "a mis-escaped %%h must be reported")
}

// unitDirectives parses a unit file into section → key → values, ignoring comments.
func unitDirectives(t *testing.T, unit []byte) map[string]map[string][]string {
	t.Helper()
	out := map[string]map[string][]string{}
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(unit))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "["):
			section = strings.Trim(line, "[]")
			out[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			require.True(t, ok, "not a directive: %q", line)
			require.NotEmpty(t, section, "directive outside a section: %q", line)
			out[section][k] = append(out[section][k], v)
		}
	}
	return out
}

// systemd-analyze verify in system mode cannot tell that the unit is meant for the user manager,
// so what makes it a correct user unit is checked here: what must be in and what must stay out.
func TestUnitIsAUserUnitThatDoesNotFenceAgentsOutOfTheirProjects(t *testing.T) {
	unit, err := RenderUnit(linuxTarget("/home/ada/.local/bin/card", "/home/ada"))
	require.NoError(t, err)
	d := unitDirectives(t, unit)

	want := map[string]map[string]string{
		"Unit": {"StartLimitIntervalSec": "300", "StartLimitBurst": "5"},
		"Service": {
			"Type": "notify", "NotifyAccess": "main", "Restart": "on-failure", "KillSignal": "SIGTERM",
			"KillMode": "mixed", "TimeoutStopSec": "20s", "NoNewPrivileges": "yes", "WorkingDirectory": "%h",
			"ExecStart": "/home/ada/.local/bin/card serve --home /home/ada/.local/state/card",
		},
		"Install": {"WantedBy": "default.target"},
	}
	for section, kv := range want {
		for k, v := range kv {
			assert.Equal(t, []string{v}, d[section][k], "[%s] %s", section, k)
		}
	}
	stop, err := time.ParseDuration(d["Service"]["TimeoutStopSec"][0])
	require.NoError(t, err)
	assert.Greater(t, stop, 10*time.Second, "must outlast the daemon's 10 s grace period")

	// Each of these either does not exist for a user manager or stops agents from working in
	// projects under $HOME, writing to /tmp, running node's JIT or using their own sandbox.
	forbidden := []string{"User", "Group", "DynamicUser", "ProtectHome", "ProtectSystem", "PrivateTmp",
		"PrivateUsers", "PrivateNetwork", "ReadOnlyPaths", "InaccessiblePaths", "MemoryDenyWriteExecute",
		"RestrictNamespaces", "RestrictAddressFamilies", "IPAddressDeny", "UMask", "CapabilityBoundingSet",
		"AmbientCapabilities", "ProtectKernelTunables", "ProtectKernelModules", "ProtectControlGroups"}
	for _, k := range forbidden {
		assert.NotContains(t, d["Service"], k)
	}
	for _, k := range []string{"After", "Wants", "Requires"} {
		for _, v := range d["Unit"][k] {
			assert.NotContains(t, v, "network-online.target", "the user manager has no network-online.target")
		}
	}
	assert.NotContains(t, d["Install"]["WantedBy"], "multi-user.target", "multi-user.target exists only for the system manager")

	path := d["Service"]["Environment"]
	require.Len(t, path, 1)
	assert.True(t, strings.HasPrefix(path[0], "PATH=/home/ada/.nvm/versions/node/v22.11.0/bin:/usr/bin:/home/ada/.local/bin:"), path[0])
}

// Every directive in the template carries a comment saying why it is there.
func TestEveryUnitDirectiveIsExplainedByACommentAboveIt(t *testing.T) {
	unit, err := templates.ReadFile("systemd/card.service")
	require.NoError(t, err)
	lines := strings.Split(string(unit), "\n")
	for i, line := range lines {
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "[") {
			continue
		}
		require.Greater(t, i, 0)
		assert.True(t, strings.HasPrefix(lines[i-1], "#"), "line %d %q has no comment above it", i+1, line)
	}
}

// launchdJob is the part of a LaunchAgent that card depends on.
type launchdJob struct {
	Label                string            `plist:"Label"`
	ProgramArguments     []string          `plist:"ProgramArguments"`
	WorkingDirectory     string            `plist:"WorkingDirectory"`
	RunAtLoad            *bool             `plist:"RunAtLoad"`
	KeepAlive            map[string]bool   `plist:"KeepAlive"`
	ThrottleInterval     int               `plist:"ThrottleInterval"`
	ExitTimeOut          int               `plist:"ExitTimeOut"`
	ProcessType          string            `plist:"ProcessType"`
	EnvironmentVariables map[string]string `plist:"EnvironmentVariables"`
	StandardOutPath      string            `plist:"StandardOutPath"`
	StandardErrorPath    string            `plist:"StandardErrorPath"`
}

func darwinTarget() Target {
	return Target{GOOS: "darwin", Binary: "/Users/ada/go/bin/card", Home: "/Users/ada",
		CardHome: "/Users/ada/Library/Application Support/card", UID: 501,
		PATH: []string{"/Users/ada/.nvm/versions/node/v22.11.0/bin", "/usr/bin", "/bin"}}
}

func TestPlistIsAnXMLPropertyListWithEveryKeyLaunchdNeeds(t *testing.T) {
	data, err := RenderPlist(darwinTarget())
	require.NoError(t, err)

	var job launchdJob
	format, err := plist.Unmarshal(data, &job)
	require.NoError(t, err)
	assert.Equal(t, plist.XMLFormat, format)

	assert.Equal(t, Label, job.Label)
	assert.Equal(t, []string{"/Users/ada/go/bin/card", "serve", "--home", "/Users/ada/Library/Application Support/card"}, job.ProgramArguments)
	assert.Equal(t, "/Users/ada", job.WorkingDirectory)
	require.NotNil(t, job.RunAtLoad)
	assert.True(t, *job.RunAtLoad)
	assert.Equal(t, map[string]bool{"SuccessfulExit": false}, job.KeepAlive)
	assert.Greater(t, job.ExitTimeOut, 10, "must outlast the daemon's 10 s grace period")
	assert.Contains(t, []string{"Interactive", "Background"}, job.ProcessType)
	assert.Equal(t, "/Users/ada/Library/Logs/card/card.out.log", job.StandardOutPath)
	assert.Equal(t, "/Users/ada/Library/Logs/card/card.err.log", job.StandardErrorPath)

	path := strings.Split(job.EnvironmentVariables["PATH"], ":")
	for _, dir := range []string{"/opt/homebrew/bin", "/usr/local/bin", "/Users/ada/.local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin", "/Users/ada/.nvm/versions/node/v22.11.0/bin"} {
		assert.Contains(t, path, dir)
	}
	for _, dir := range path {
		assert.True(t, filepath.IsAbs(dir), "PATH entry %q must be absolute: launchd does not expand ~", dir)
	}
}

func TestPlistCarriesMarkupCharactersInPathsLiterally(t *testing.T) {
	target := darwinTarget()
	target.Binary = "/Users/ada/R&D <tools>/card"
	data, err := RenderPlist(target)
	require.NoError(t, err)
	var job launchdJob
	_, err = plist.Unmarshal(data, &job)
	require.NoError(t, err)
	assert.Equal(t, "/Users/ada/R&D <tools>/card", job.ProgramArguments[0])
}

func validateDesktop(t *testing.T, entry []byte) {
	t.Helper()
	validator := requireTool(t, "desktop-file-validate", "desktop-file-utils")
	path := filepath.Join(t.TempDir(), "card.desktop")
	require.NoError(t, os.WriteFile(path, entry, 0o644))
	out, err := runTool(t, nil, validator, path)
	require.NoError(t, err, "desktop-file-validate: %s", out)
	assert.Empty(t, strings.TrimSpace(out), "desktop-file-validate must print nothing, not even hints")
}

func TestAutostartEntryPassesDesktopFileValidate(t *testing.T) {
	entry, err := RenderDesktop(linuxTarget("/home/ada/.local/bin/card", "/home/ada"))
	require.NoError(t, err)
	validateDesktop(t, entry)
	for _, line := range []string{"Type=Application", "NoDisplay=true", "X-GNOME-Autostart-enabled=true",
		"Terminal=false", "TryExec=/home/ada/.local/bin/card"} {
		assert.Contains(t, strings.Split(string(entry), "\n"), line)
	}
}

func TestAutostartEntryForAnAwkwardPathPassesDesktopFileValidate(t *testing.T) {
	target := linuxTarget(`/home/ada/My Apps/100% $pecial "card"\bin/card`, "/home/ada")
	target.Supervisor = Autostart
	entry, err := RenderDesktop(target)
	require.NoError(t, err)
	validateDesktop(t, entry)
	assert.Contains(t, string(entry), `Exec=env PATH=`)
	assert.Contains(t, string(entry), `"/home/ada/My Apps/100%% \\$pecial \\"card\\"\\\\bin/card" serve`)
}

func TestQuotingPerFormat(t *testing.T) {
	cases := []struct {
		name, in, systemd, env, desktop string
	}{
		{"plain word stays bare", "serve", "serve", "serve", "serve"},
		{"space is quoted", "/a b/card", `"/a b/card"`, `"/a b/card"`, `"/a b/card"`},
		{"percent is doubled everywhere", "/100%", "/100%%", "/100%%", "/100%%"},
		{"dollar is literal", "/$HOME", "/$$HOME", "/$HOME", `"/\\$HOME"`},
		{"quote and backslash are escaped", `/a"b\c`, `"/a\"b\\c"`, `"/a\"b\\c"`, `"/a\\"b\\\\c"`},
		{"empty argument survives", "", `""`, `""`, `""`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.systemd, systemdArg(c.in))
			assert.Equal(t, c.env, systemdEnv(c.in))
			assert.Equal(t, c.desktop, desktopArg(c.in))
		})
	}
}

func TestTargetsThatCannotMakeAWorkingServiceAreRefusedBeforeRendering(t *testing.T) {
	good := linuxTarget("/usr/local/bin/card", "/home/ada")
	cases := map[string]func(*Target){
		"relative binary":           func(t *Target) { t.Binary = "card" },
		"newline in the binary":     func(t *Target) { t.Binary = "/usr/local/bin/card\nExecStartPre=/bin/rm" },
		"relative card home":        func(t *Target) { t.CardHome = "state/card" },
		"unsupported OS":            func(t *Target) { t.GOOS = "windows" },
		"unknown linux supervisor":  func(t *Target) { t.Supervisor = Launchd },
		"quote in a systemd binary": func(t *Target) { t.Binary = `/opt/"card"/card` },
		"launchd without a user id": func(t *Target) { t.GOOS = "darwin"; t.UID = 0 },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			target := good
			mutate(&target)
			_, err := RenderUnit(target)
			assert.Error(t, err)
			_, err = Plan(target, Install)
			assert.Error(t, err)
		})
	}
	_, err := RenderUnit(good)
	assert.NoError(t, err)
}

func TestServicePATHKeepsShellOrderDropsRelativeAndDuplicateEntries(t *testing.T) {
	target := linuxTarget("/usr/local/bin/card", "/home/ada")
	target.PATH = []string{"/opt/x/bin", "", ".", "bin", "/usr/bin/", "/opt/x/bin", "/home/ada/.local/bin"}
	got := target.ServicePATH()
	assert.Equal(t, []string{"/opt/x/bin", "/usr/bin", "/home/ada/.local/bin", "/home/ada/.npm-global/bin",
		"/home/ada/.volta/bin", "/home/ada/.bun/bin", "/usr/local/bin", "/bin", "/usr/local/sbin", "/usr/sbin", "/sbin"}, got)
}
