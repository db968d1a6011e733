package daemon

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	homedir "github.com/card-dev/card/internal/home"
)

// watchedListener reports, when it is closed, whether daemon.json was
// still there.
type watchedListener struct {
	net.Listener
	home        string
	closed      atomic.Bool
	discPresent atomic.Bool
}

func (l *watchedListener) Close() error {
	if !l.closed.Swap(true) {
		_, err := os.Stat(filepath.Join(l.home, homedir.DiscoveryFileName))
		l.discPresent.Store(!errors.Is(err, fs.ErrNotExist))
	}
	return l.Listener.Close()
}

// Once the listener closes, another user may bind the port; daemon.json
// must not name it by then, or a client would send the token there.
func TestDaemonJSONIsGoneBeforeTheListenerCloses(t *testing.T) {
	home := filepath.Join(t.TempDir(), "card")
	d, err := New(Options{Home: home, Addr: "127.0.0.1:0", Logger: zap.NewNop(),
		Environ: []string{"HOME=" + t.TempDir(), "PATH=/usr/bin:/bin"}})
	require.NoError(t, err)
	require.NoError(t, d.Start())
	_, err = os.Stat(filepath.Join(home, homedir.DiscoveryFileName))
	require.NoError(t, err, "a started daemon has written daemon.json")

	w := &watchedListener{Listener: d.ln, home: home}
	d.ln = w
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, d.Shutdown(ctx))
	require.True(t, w.closed.Load(), "Shutdown closed the listener")
	assert.False(t, w.discPresent.Load(), "daemon.json was still there when the listener closed")
	_, err = os.Stat(filepath.Join(home, homedir.TokenFileName))
	assert.True(t, errors.Is(err, fs.ErrNotExist), "the token is removed at shutdown")
}
