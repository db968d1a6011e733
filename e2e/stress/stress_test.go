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
	"strings"
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

// warmClaude writes a fake Claude Code that speaks the stream-json input
// channel a warm agent of card uses, as a shell script the way the bug
// report's was: it answers the initialize control request, and each
// {"type":"user"} line with an init line, the prompt's text echoed back and
// a result. A prompt holding SLEEPn takes n seconds; an interrupt ends the
// running turn at once. Every prompt it takes is appended to prompts.log in
// its directory, in the order it read them.
func warmClaude(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	body := `#!/bin/bash
case "$1" in --version) echo "2.1.197 (Claude Code)"; exit 0;; auth|login) exit 1;; esac
sid=5f0c7e4a-1111-4222-8333-944455556666
log="$(dirname "$0")/prompts.log"
turn=0
sleeper=
emit() { printf '%s\n' "$1"; }
while IFS= read -r line; do
  case "$line" in
  *'"subtype":"initialize"'*)
    rid=${line#*\"request_id\":\"}; rid=${rid%%\"*}
    emit '{"type":"control_response","response":{"subtype":"success","request_id":"'"$rid"'","response":{"commands":[]}}}'
    ;;
  *'"subtype":"interrupt"'*)
    rid=${line#*\"request_id\":\"}; rid=${rid%%\"*}
    [ -n "$sleeper" ] && kill "$sleeper" 2>/dev/null
    emit '{"type":"control_response","response":{"subtype":"success","request_id":"'"$rid"'"}}'
    ;;
  *'"type":"user"'*)
    turn=$((turn+1))
    text=${line##*\"text\":\"}; text=${text%%\"*}
    printf '%s\n' "$text" >> "$log"
    emit '{"type":"system","subtype":"init","session_id":"'$sid'","model":"claude-fake","slash_commands":[]}'
    secs=0
    case "$text" in *SLEEP*) secs=${text##*SLEEP}; secs=${secs%% *};; esac
    if [ "$secs" != 0 ]; then
      sleep "$secs" & sleeper=$!; wait "$sleeper"; sleeper=
    fi
    emit '{"type":"assistant","session_id":"'$sid'","message":{"id":"m'$turn'","type":"message","role":"assistant","model":"claude-fake","content":[{"type":"text","text":"You said: '"$text"'"}]}}'
    emit '{"type":"result","subtype":"success","is_error":false,"result":"You said: '"$text"'","session_id":"'$sid'","num_turns":1,"total_cost_usd":0,"usage":{"input_tokens":3,"output_tokens":2}}'
    ;;
  esac
done
`
	p := filepath.Join(dir, "claude")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o755))
	return p
}

// promptsRead is what the fake Claude of bin read, in order.
func promptsRead(t *testing.T, bin string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(filepath.Dir(bin), "prompts.log"))
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	return strings.Split(strings.TrimSpace(string(b)), "\n")
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
