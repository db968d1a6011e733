package daemon_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/card-dev/card/client"
	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/daemon/daemontest"
	homedir "github.com/card-dev/card/internal/home"
	"github.com/card-dev/card/internal/testskip"
	"github.com/card-dev/card/rpc/rpcclient"
)

// newDaemon prepares a daemon on home and returns New's error; a daemon it
// did make is shut down at once. For tests of what New refuses.
func newDaemon(t *testing.T, home string) error {
	t.Helper()
	d, err := daemon.New(daemon.Options{Home: home, Addr: "127.0.0.1:0", Logger: zap.NewNop(),
		Environ: []string{"HOME=" + t.TempDir(), "PATH=/usr/bin:/bin"}})
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = d.Shutdown(ctx)
	}
	return err
}

func TestAHomeThatIsASymlinkIsRefusedAndNothingIsWrittenThroughIt(t *testing.T) {
	dir := t.TempDir()
	planted := filepath.Join(dir, "theirs")
	require.NoError(t, os.Mkdir(planted, 0o755))
	home := filepath.Join(dir, "card")
	require.NoError(t, os.Symlink(planted, home))

	err := newDaemon(t, home)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "is a symbolic link")
	assert.Contains(t, err.Error(), "--home or CARD_HOME", "the message says what to do")
	entries, _ := os.ReadDir(planted)
	assert.Empty(t, entries, "nothing was written through the link")
	st, _ := os.Stat(planted)
	assert.Equal(t, os.FileMode(0o755), st.Mode().Perm(), "the link's target was not chmodded")

	_, err = client.Dial(daemontest.Context(t), client.Options{Home: home})
	require.Error(t, err, "a client does not read through a planted home either")
	assert.Contains(t, err.Error(), "is a symbolic link")
}

func TestAHomeOthersCanWriteToIsRefusedAndOneOthersCanReadIsTightened(t *testing.T) {
	writable := filepath.Join(t.TempDir(), "card")
	require.NoError(t, os.Mkdir(writable, 0o700))
	require.NoError(t, os.Chmod(writable, 0o777))
	err := newDaemon(t, writable)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "writable by others (mode 0777)")
	assert.Contains(t, err.Error(), "chmod 700 "+writable)

	readable := filepath.Join(t.TempDir(), "card")
	require.NoError(t, os.Mkdir(readable, 0o700))
	require.NoError(t, os.Chmod(readable, 0o755))
	require.NoError(t, newDaemon(t, readable))
	st, err := os.Stat(readable)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), st.Mode().Perm())
}

func TestAHomeInADirectoryOthersCanWriteWithoutTheStickyBitIsRefused(t *testing.T) {
	shared := filepath.Join(t.TempDir(), "shared")
	require.NoError(t, os.Mkdir(shared, 0o700))
	require.NoError(t, os.Chmod(shared, 0o777))
	err := newDaemon(t, filepath.Join(shared, "card"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "which others can write to (mode 0777, no sticky bit)")

	require.NoError(t, os.Chmod(shared, 0o777|os.ModeSticky))
	assert.NoError(t, newDaemon(t, filepath.Join(shared, "card")), "a sticky directory such as /tmp is fine")

	require.NoError(t, os.Chmod(shared, 0o775))
	assert.NoError(t, newDaemon(t, filepath.Join(shared, "card2")), "a directory only its group may write to is let be")
}

func TestAHomeOwnedByAnotherUserIsRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		testskip.Skip(t, testskip.Gap{Why: "needs root to give a home to another uid", Enable: "run as root (e2e/multiuser covers it with real users)"},
			"!!! needs root to give a directory to another uid")
	}
	home := filepath.Join(t.TempDir(), "card")
	require.NoError(t, os.Mkdir(home, 0o700))
	require.NoError(t, os.Chown(home, 65534, 65534))
	err := newDaemon(t, home)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "belongs to uid 65534, not you (uid 0)")
}

// Each file a daemon trusts in its home is refused when it is a link, and
// the link's target is left alone.
func TestATokenDaemonJSONOrLockThatIsALinkIsRefused(t *testing.T) {
	for _, name := range []string{homedir.TokenFileName, homedir.DiscoveryFileName, homedir.LockFileName} {
		t.Run(name, func(t *testing.T) {
			home := filepath.Join(t.TempDir(), "card")
			require.NoError(t, os.Mkdir(home, 0o700))
			target := filepath.Join(t.TempDir(), "elsewhere")
			require.NoError(t, os.WriteFile(target, []byte("not card's\n"), 0o644))
			require.NoError(t, os.Symlink(target, filepath.Join(home, name)))

			err := newDaemon(t, home)
			require.Error(t, err)
			assert.Contains(t, err.Error(), filepath.Join(home, name)+" is a symbolic link")
			assert.Contains(t, err.Error(), "remove it")
			b, _ := os.ReadFile(target)
			assert.Equal(t, "not card's\n", string(b))
		})
	}
}

func TestAClientRefusesATokenThatIsALink(t *testing.T) {
	d := daemontest.Start(t, daemontest.Options{NoClient: true})
	tok := filepath.Join(d.Home, homedir.TokenFileName)
	elsewhere := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(elsewhere, []byte(d.Token+"\n"), 0o600))
	require.NoError(t, os.Remove(tok))
	require.NoError(t, os.Symlink(elsewhere, tok))

	_, err := client.Dial(daemontest.Context(t), client.Options{Home: d.Home})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "is a symbolic link")

	// The daemon's gate refuses to read it too: it answers 503 rather
	// than compare against a file it did not write.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, resp, err := websocket.Dial(ctx, d.URL, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + d.Token}}})
	require.Error(t, err)
	require.NotNil(t, resp)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
}

func TestEveryStartMakesANewTokenAndRemovesADeadDaemonsDiscoveryFirst(t *testing.T) {
	home := filepath.Join(t.TempDir(), "card")
	first := daemontest.Start(t, daemontest.Options{Home: home, NoClient: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, first.Shutdown(ctx))
	_, err := os.Stat(filepath.Join(home, homedir.TokenFileName))
	assert.True(t, os.IsNotExist(err), "the token went with its daemon")

	// A dead daemon's leftovers: its daemon.json and token.
	stale := `{"url":"ws://127.0.0.1:1/rpc","pid":999999999}`
	require.NoError(t, os.WriteFile(filepath.Join(home, homedir.DiscoveryFileName), []byte(stale), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(home, homedir.TokenFileName), []byte(first.Token+"\n"), 0o600))

	second := daemontest.Start(t, daemontest.Options{Home: home, NoClient: true})
	assert.NotEqual(t, first.Token, second.Token)
	disc, err := daemon.ReadDiscovery(home)
	require.NoError(t, err)
	assert.Equal(t, second.URL, disc.URL)
	exe, _ := os.Executable()
	assert.Equal(t, exe, disc.Exe, "daemon.json names the executable, for clients to check the pid against")
}

// A daemon told to listen on another loopback address accepts its own URL:
// the address it listens on is a Host it accepts, and no other address is.
func TestADaemonOnAnotherLoopbackAddressAcceptsItsOwnURL(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("only Linux routes all of 127.0.0.0/8 to loopback without an alias")
	}
	d := daemontest.Start(t, daemontest.Options{Addr: "127.0.0.2:0"})
	require.True(t, strings.HasPrefix(d.URL, "ws://127.0.0.2:"), d.URL)
	ctx := daemontest.Context(t)
	info, err := d.Client.Info(ctx)
	require.NoError(t, err, "the daemon's own URL passes its Host check")
	assert.Equal(t, d.URL, info.URL)

	c, err := client.Dial(ctx, client.Options{Home: d.Home})
	require.NoError(t, err, "a client that finds it through daemon.json checks its socket and connects")
	_ = c.Close()

	port := strings.TrimSuffix(strings.TrimPrefix(d.URL, "ws://127.0.0.2:"), "/rpc")
	for _, host := range []string{"localhost:" + port, "127.0.0.1:" + port} {
		c := d.Dial(t, client.Options{RPC: rpcclient.ClientOptions{Host: host}})
		_, err := c.Info(ctx)
		assert.NoError(t, err, "the loopback names stay accepted: %s", host)
	}
	_, resp, err := websocket.Dial(ctx, d.URL, &websocket.DialOptions{Host: "127.0.0.3:" + port,
		HTTPHeader: http.Header{"Authorization": {"Bearer " + d.Token}}})
	require.Error(t, err)
	require.NotNil(t, resp)
	assert.Equal(t, http.StatusForbidden, resp.StatusCode, "only the address it listens on is added")
}
