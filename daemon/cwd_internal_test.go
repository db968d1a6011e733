package daemon

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// The policy over resolved paths, without a filesystem: what a run that
// writes may use as its cwd, and what the operator's allowed dirs change.
func TestTheCwdPolicyRefusesTheRootHomesAndSystemDirsButNotAProject(t *testing.T) {
	p := cwdPolicy{Home: "/home/u", CardHome: "/home/u/.local/state/card"}
	allowed := cwdPolicy{Home: "/home/u", CardHome: "/home/u/.local/state/card", Allowed: []string{"/etc/nginx", "/home/u"}}
	cases := []struct {
		dir, why   string
		allowedWhy string // with allowed; "-" means the same as why
	}{
		{"/", "the root of the filesystem", "-"},
		{"/home/u", "your home directory itself", ""},
		{"/home", "holds card's own home", "-"},
		{"/Users", "/Users itself", "-"},
		{"/home/u/src/app", "", ""},
		{"/home/u/.ssh", "credentials and login items", ""},
		{"/home/u/.config/systemd/user", "credentials and login items", ""},
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
	}
	for _, c := range cases {
		got := p.refusal(c.dir)
		if c.why == "" {
			assert.Empty(t, got, c.dir)
		} else {
			assert.Contains(t, got, c.why, c.dir)
		}
		want := c.allowedWhy
		if want == "-" {
			want = c.why
		}
		got = allowed.refusal(c.dir)
		if want == "" {
			assert.Empty(t, got, "%s with allowed dirs", c.dir)
		} else {
			assert.Contains(t, got, want, "%s with allowed dirs", c.dir)
		}
	}
}
