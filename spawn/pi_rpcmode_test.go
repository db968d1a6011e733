package spawn

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
)

// Pi asks through card's gate: the ask plan runs `pi --mode rpc` with the
// gate extension from the run's private dir, every built-in tool offered,
// and none of the user's extensions.
func TestPiAskPlanRunsRPCModeWithCardsGate(t *testing.T) {
	p, err := Build("/usr/bin/pi", Request{Adapter: agent.Pi, Mode: ModeAsk, Cwd: cwd, Model: "m", Images: []Image{{Name: "a.png", MIME: "image/png", Data: pngBytes}},
		Extras: Extras{Args: []string{"--provider", "x"}}})
	require.NoError(t, err)
	assert.Equal(t, &SessionPlan{Protocol: ProtocolPiRPC, Adapter: agent.Pi}, p.Session)
	assert.Equal(t, &AskPlan{Channel: AskViaSession}, p.Ask)
	assert.Equal(t, []string{"--provider", "x", "--mode", "rpc", "--no-session", "-nc", "--no-extensions", "-e", FileRef(piAskGateFile),
		"--no-skills", "--no-prompt-templates", "--no-themes", "--offline", "--tools", "read,grep,find,ls,edit,write,bash", "--model", "m"}, p.Args)
	assert.NotContains(t, p.Args, "-p", "the prompt goes in the prompt command")
	require.Len(t, p.Files, 1)
	assert.Equal(t, piAskGateFile, p.Files[0].Path)
	assert.Equal(t, os.FileMode(0o600), p.Files[0].Mode)
	assert.Contains(t, string(p.Files[0].Content), `new Set(["read","grep","find","ls"])`, "read_only's set runs unasked")
	assert.Contains(t, string(p.Files[0].Content), "ctx.ui.confirm")
	assert.Len(t, p.Input.Images, 1, "images go in the prompt command")

	p, err = Build("/usr/bin/pi", Request{Adapter: agent.Pi, Mode: ModeAsk, Cwd: cwd, AllowedTools: []string{"read", "bash"}})
	require.NoError(t, err)
	assert.Contains(t, p.Args, "read,bash", "allowed_tools narrows the tools offered")
	_, err = Build("/usr/bin/pi", Request{Adapter: agent.Pi, Mode: ModeAsk, Cwd: cwd, AllowedTools: []string{"web"}})
	var fe *api.FieldError
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "allowed_tools", fe.Field)
}

// fakePi is a fake `pi --mode rpc` running card's gate: the lines Pi 0.73.1
// writes. Scripts:
//
//	turn    reads a file unasked, then asks about bash; writes made.txt if
//	        confirmed and answers quoting the tool's result either way.
//	die     exits 3 after accepting the prompt.
//	silent  starts a grandchild (pid in grandchild.pid), answers nothing.
//	noise   fakeNoise, then as turn.
func fakePi(script string) int {
	if script == "silent" {
		return fakeSilent()
	}
	if script == "noise" {
		fakeNoise()
		script = "turn"
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	say := func(s string) { fmt.Println(s) }
	for in.Scan() {
		var m struct {
			ID, Type, Message string
			Images            []struct{ Type, Data, MimeType string }
		}
		if json.Unmarshal(in.Bytes(), &m) != nil || m.Type != "prompt" {
			continue
		}
		say(`{"id":` + strconv.Quote(m.ID) + `,"type":"response","command":"prompt","success":true}`)
		if script == "die" {
			fmt.Fprintln(os.Stderr, "fatal: the fake pi fell over")
			os.Exit(3)
		}
		said := m.Message
		for _, i := range m.Images {
			said += " " + i.MimeType + ":" + i.Data
		}
		fakePiTurn(in, say, said)
	}
	return 0
}

func fakePiTurn(in *bufio.Scanner, say func(string), said string) {
	usage := `"usage":{"input":10,"output":5,"cacheRead":1,"cost":{"total":0}}`
	say(`{"type":"agent_start"}`)
	say("a log line that is not JSON")
	say(`{"type":"tool_execution_start","toolCallId":"t-read","toolName":"read","args":{"path":"a.txt"}}`)
	say(`{"type":"tool_execution_end","toolCallId":"t-read","toolName":"read","result":{"content":[{"type":"text","text":"old"}]},"isError":false}`)
	say(`{"type":"message_end","message":{"role":"assistant","model":"m","content":[{"type":"toolCall","id":"t-1","name":"bash","arguments":{"command":"echo hello > made.txt"}}],` + usage + `,"stopReason":"toolUse"}}`)
	say(`{"type":"tool_execution_start","toolCallId":"t-1","toolName":"bash","args":{"command":"echo hello > made.txt"}}`)
	call, _ := json.Marshal(`{"tool":"bash","input":{"command":"echo hello > made.txt"},"toolCallId":"t-1"}`)
	const q = "b66469dc-0000-4000-8000-000000000001"
	say(`{"type":"extension_ui_request","id":"` + q + `","method":"confirm","title":"card: allow bash?","message":` + string(call) + `}`)
	var confirmed bool
	for in.Scan() {
		var a struct {
			Type, ID  string
			Confirmed *bool
		}
		if json.Unmarshal(in.Bytes(), &a) == nil && a.Type == "extension_ui_response" && a.ID == q && a.Confirmed != nil {
			confirmed = *a.Confirmed
			break
		}
	}
	result, isErr := `"(no output)"`, "false"
	if confirmed {
		_ = os.WriteFile("made.txt", []byte("hello\n"), 0o600)
	} else {
		result, isErr = `"The user denied this tool call."`, "true"
	}
	say(`{"type":"tool_execution_end","toolCallId":"t-1","toolName":"bash","result":{"content":[{"type":"text","text":` + result + `}]},"isError":` + isErr + `}`)
	text, _ := json.Marshal("DONE | " + strings.Trim(result, `"`) + " | " + said)
	say(`{"type":"message_update","assistantMessageEvent":{"type":"text_delta","delta":` + string(text) + `}}`)
	say(`{"type":"message_end","message":{"role":"assistant","model":"m","content":[{"type":"text","text":` + string(text) + `}],` + usage + `,"stopReason":"stop"}}`)
	say(`{"type":"agent_end","messages":[]}`)
}

func piRun(t *testing.T, ctx context.Context, script string, approver Approver, lim Limits, images ...Image) (api.Result, []Event, string, error) {
	p := piProtocol.plan(script)
	p.Input.Images = images
	return sessionRun(t, ctx, p, approver, lim)
}

func TestAPiTurnPutsTheGatesQuestionToTheApproverAndAnswersConfirmed(t *testing.T) {
	for _, allow := range []bool{true, false} {
		r := &recorder{answer: func(Question) Decision { return Decision{Allow: allow, Message: "no"} }}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		res, evs, work, err := piRun(t, ctx, "turn", r, Limits{KillGrace: 300 * time.Millisecond})
		cancel()
		require.NoError(t, err, "allow=%v", allow)
		require.Len(t, r.asked, 1, "the read ran unasked")
		q := r.asked[0]
		assert.Equal(t, Question{Tool: "bash", Input: json.RawMessage(`{"command":"echo hello > made.txt"}`), ToolUseID: "t-1", Summary: "bash: echo hello > made.txt"}, q)
		assert.Equal(t, []string{api.EventOther, api.EventToolUse, api.EventToolResult, api.EventUsage, api.EventToolUse, api.EventToolResult, api.EventText, api.EventUsage}, kinds(evs))
		assert.Equal(t, "a log line that is not JSON", evs[0].Text)
		assert.Equal(t, 2, res.ToolCalls)
		assert.Equal(t, 2, res.Turns)
		assert.Equal(t, api.Usage{InputTokens: 20, OutputTokens: 10, CachedInputTokens: 2}, res.Usage)
		if allow {
			assert.FileExists(t, filepath.Join(work, "made.txt"))
			assert.Equal(t, "DONE | (no output) | Please create the file.", res.Answer, "the prompt went in the prompt command")
		} else {
			assert.NoFileExists(t, filepath.Join(work, "made.txt"))
			assert.Equal(t, "DONE | The user denied this tool call. | Please create the file.", res.Answer, "the model got the denial and went on")
			assert.True(t, evs[5].IsError)
		}
	}
}

func TestImagesGoInPisPromptCommand(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := &recorder{answer: func(Question) Decision { return Decision{} }}
	res, _, _, err := piRun(t, ctx, "turn", r, Limits{KillGrace: 300 * time.Millisecond}, Image{Name: "a.png", MIME: "image/png", Data: []byte("PNG")})
	require.NoError(t, err)
	assert.Equal(t, "DONE | The user denied this tool call. | Please create the file. image/png:UE5H", res.Answer)
}

// A warm Pi agent reports the session card named, in every turn's result,
// though Pi's RPC mode prints no id of its own.
func TestAWarmPiAgentReportsTheSessionCardNamed(t *testing.T) {
	plan := warmFakes[3].plan(t.TempDir())
	require.Equal(t, agent.Pi, plan.Session.Adapter)
	plan.SessionID = "123e4567-e89b-12d3-a456-426614174000"
	w, _ := startFake(t, plan, Limits{})
	for range 2 {
		res, _, err := doTurn(t, w, within(t, 20*time.Second), "hello")
		require.NoError(t, err)
		assert.Equal(t, plan.SessionID, res.SessionID)
	}
	assert.Equal(t, plan.SessionID, w.AgentSessionID())
}
