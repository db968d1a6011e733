package spawn

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/card-dev/card/internal/fakeacp"
	"github.com/card-dev/card/internal/fakeclaude"
	"github.com/card-dev/card/internal/testskip"
)

// helperEnv makes the test binary act as a fake agent when re-executed, so
// the runner is tested against a real child without external tools.
const helperEnv = "CARD_SPAWN_TEST_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(helper(mode))
	}
	if os.Getenv(fakeclaude.EnvVar) != "" {
		os.Exit(fakeclaude.Main())
	}
	if os.Getenv(fakeacp.EnvVar) != "" {
		os.Exit(fakeacp.Main())
	}
	goleak.VerifyTestMain(testskip.Wrap(m))
}

// helper is the fake agent. "stream:N" writes N bytes of Claude stream-json
// (assistant text lines and a final result), as fast as it can; "acp:S"
// speaks ACP with script S (fakeACP).
func helper(mode string) int {
	switch {
	case strings.HasPrefix(mode, "stream:"):
		n, _ := strconv.ParseInt(strings.TrimPrefix(mode, "stream:"), 10, 64)
		return fakeClaudeStream(n)
	case strings.HasPrefix(mode, "acp:"):
		return fakeACP(strings.TrimPrefix(mode, "acp:"))
	case strings.HasPrefix(mode, "codex:"):
		return fakeCodexApp(strings.TrimPrefix(mode, "codex:"))
	case strings.HasPrefix(mode, "droid:"):
		return fakeDroid(strings.TrimPrefix(mode, "droid:"))
	case strings.HasPrefix(mode, "claudewarm:"):
		return fakeClaudeWarm(strings.TrimPrefix(mode, "claudewarm:"))
	case strings.HasPrefix(mode, "droidwarm:"):
		return fakeDroidWarm(strings.TrimPrefix(mode, "droidwarm:"))
	case strings.HasPrefix(mode, "piwarm:"):
		return fakePiWarm(strings.TrimPrefix(mode, "piwarm:"))
	case strings.HasPrefix(mode, "codexwarm:"):
		return fakeCodexWarm(strings.TrimPrefix(mode, "codexwarm:"))
	case strings.HasPrefix(mode, "acpwarm:"):
		return fakeACPWarm(strings.TrimPrefix(mode, "acpwarm:"))
	case strings.HasPrefix(mode, "pi:"):
		return fakePi(strings.TrimPrefix(mode, "pi:"))
	}
	fmt.Fprintln(os.Stderr, "unknown helper mode", mode)
	return 2
}

func fakeClaudeStream(n int64) int {
	w := os.Stdout
	line := []byte(`{"type":"assistant","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-fake","content":[{"type":"text","text":"` +
		strings.Repeat("lorem ipsum dolor sit amet ", 30) + `"}],"stop_reason":null,"usage":{"input_tokens":10,"output_tokens":1}},"parent_tool_use_id":null,"session_id":"942c07c4-8230-4293-9685-338fbcab211c"}` + "\n")
	buf := make([]byte, 0, 256<<10)
	var written int64
	w.WriteString(`{"type":"system","subtype":"init","session_id":"942c07c4-8230-4293-9685-338fbcab211c","model":"claude-fake"}` + "\n")
	for written < n {
		buf = buf[:0]
		for len(buf)+len(line) <= cap(buf) && written+int64(len(buf)) < n {
			buf = append(buf, line...)
		}
		if _, err := w.Write(buf); err != nil {
			return 1
		}
		written += int64(len(buf))
	}
	w.WriteString(`{"type":"result","subtype":"success","is_error":false,"duration_ms":5,"num_turns":1,"result":"done","session_id":"942c07c4-8230-4293-9685-338fbcab211c","total_cost_usd":0.01,"usage":{"input_tokens":10,"output_tokens":5,"cache_read_input_tokens":2}}` + "\n")
	return 0
}
