package daemontest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/internal/proc"
)

// WarmClaude writes a fake Claude Code that speaks the stream-json input
// channel a warm agent of card uses, as a shell script (no build, and a
// process as plain as a CLI's launcher): it answers the initialize control
// request, and each
// {"type":"user"} line with an init line, the prompt's text echoed back and
// a result. A prompt holding SLEEPn takes n seconds; an interrupt ends the
// running turn at once. Every prompt it takes is appended to prompts.log in
// its directory, in the order it read them.
func WarmClaude(t testing.TB) string {
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
	require.NoError(t, proc.WriteExecutable(p, []byte(body)))
	return p
}

// PromptsRead is what the fake Claude of bin (WarmClaude) read, in order.
func PromptsRead(t testing.TB, bin string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(filepath.Dir(bin), "prompts.log"))
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}
