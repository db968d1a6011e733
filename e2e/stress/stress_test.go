// Package stress_test repeats the scenarios that once killed the daemon, on
// the binary a user builds from the README (cgo where a C compiler exists),
// and counts deaths. A daemon that dies by a signal no Go code sees leaves
// nothing in its log, so each round checks the process itself: alive after
// the scenario, and a clean exit (0) on SIGTERM.
//
// The default `go test ./...` runs a few rounds of each. The figures in
// docs/reliability.md come from the long form:
//
//	CARD_STRESS_ROUNDS=50 CARD_E2E=1 go test -count=1 -timeout 60m -v ./e2e/stress/
//	CARD_STRESS_ROUNDS=50 CARD_STRESS_RACE=1 CARD_STRESS_BUSY=2 CARD_E2E=1 go test -count=1 -timeout 90m -v ./e2e/stress/
//
// CARD_STRESS_RACE=1 builds card with -race; CARD_STRESS_BUSY=N keeps N
// busy loops running on the machine's cores while the rounds run.
package stress_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/internal/testskip"
)

func TestMain(m *testing.M) { daemontest.VerifyTestMain(m) }

// rounds is CARD_STRESS_ROUNDS, or def.
func rounds(def int) int {
	if n, err := strconv.Atoi(os.Getenv("CARD_STRESS_ROUNDS")); err == nil && n > 0 {
		return n
	}
	return def
}

var (
	buildOnce sync.Once
	built     string
	buildErr  error
)

// card builds ./cmd/card once for the package: the README's build (cgo as
// the go command decides), with -race under CARD_STRESS_RACE=1.
func card(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "card-stress-")
		if err != nil {
			buildErr = err
			return
		}
		built = filepath.Join(dir, "card")
		args := []string{"build", "-o", built}
		if os.Getenv("CARD_STRESS_RACE") == "1" {
			args = append(args, "-race")
		}
		out, err := exec.Command("go", append(args, "github.com/card-dev/card/cmd/card")...).CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v: %s", err, out)
		}
	})
	require.NoError(t, buildErr)
	t.Cleanup(func() {}) // the binary is shared by the package's tests
	return built
}

// busy starts CARD_STRESS_BUSY busy loops (sh processes spinning), ended
// at cleanup.
func busy(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("CARD_STRESS_BUSY"))
	for range n {
		cmd := exec.Command("sh", "-c", "while :; do :; done")
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
	if n > 0 {
		t.Logf("%d busy loops running", n)
	}
}

// survived checks the daemon of p is alive, answers, and exits 0 on
// SIGTERM; a death is reported with the way it died.
func survived(t *testing.T, p *daemontest.Process, round int) bool {
	t.Helper()
	if err := p.Cmd.Process.Signal(syscall.Signal(0)); err != nil || p.Cmd.ProcessState != nil {
		t.Errorf("round %d: the daemon died: %v (%v)", round, err, p.Cmd.ProcessState)
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := p.Client.Info(ctx); err != nil {
		t.Errorf("round %d: the daemon does not answer: %v", round, err)
		return false
	}
	require.NoError(t, p.Client.Close())
	p.Client = nil
	require.NoError(t, p.Cmd.Process.Signal(syscall.SIGTERM))
	code := p.Wait(t, 30*time.Second)
	if code != 0 {
		t.Errorf("round %d: the daemon exited %d on SIGTERM (%v)", round, code, p.Cmd.ProcessState)
		return false
	}
	return true
}

// skipUnlessOn skips the long scenarios unless end-to-end tests run.
func skipUnlessOn(t *testing.T) {
	t.Helper()
	if os.Getenv("CARD_E2E") != "1" && !testskip.Required() {
		testskip.Skip(t, testskip.RealCLIsOff, "the repeated daemon scenarios take a minute")
	}
}

// sendBackToBack writes frames to a new connection of p one after the
// other, without waiting, and reads an answer to each, by id.
func sendBackToBack(t *testing.T, p *daemontest.Process, frames []string) map[int]json.RawMessage {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, p.URL, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + p.Token}}})
	require.NoError(t, err)
	defer ws.CloseNow()
	for _, f := range frames {
		require.NoError(t, ws.Write(ctx, websocket.MessageText, []byte(f)))
	}
	answers := map[int]json.RawMessage{}
	for len(answers) < len(frames) {
		_, b, err := ws.Read(ctx)
		require.NoError(t, err)
		var a struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		require.NoError(t, json.Unmarshal(b, &a))
		if a.ID == 0 {
			continue
		}
		require.Nil(t, a.Error, "request %d was refused: %s", a.ID, a.Error)
		answers[a.ID] = a.Result
	}
	return answers
}
