package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/internal/fakeagent"
)

// card fake-agent is an ACP agent on the command's own stdin and stdout,
// ending when its stdin closes.
func TestCardFakeAgentSpeaksACPOnItsStdio(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	var errOut bytes.Buffer
	code := make(chan int, 1)
	go func() {
		code <- run([]string{fakeAgentCommand, "--name", "Fake Agent", "--no-sign-in"}, inR, outW, &errOut)
		outW.Close()
	}()
	_, err := io.WriteString(inW, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{"fs":{"readTextFile":false,"writeTextFile":false},"terminal":false}}}`+"\n")
	require.NoError(t, err)
	line, err := bufio.NewReader(outR).ReadBytes('\n')
	require.NoError(t, err)
	var msg struct {
		ID     int `json:"id"`
		Result struct {
			ProtocolVersion int               `json:"protocolVersion"`
			AuthMethods     []json.RawMessage `json:"authMethods"`
			AgentInfo       struct{ Name string }
		} `json:"result"`
	}
	require.NoError(t, json.Unmarshal(line, &msg), "%s", line)
	assert.Equal(t, 1, msg.ID)
	assert.Equal(t, 1, msg.Result.ProtocolVersion)
	assert.Equal(t, "Fake Agent", msg.Result.AgentInfo.Name)
	assert.Empty(t, msg.Result.AuthMethods, "--no-sign-in offers no sign-in")
	inW.Close()
	go io.Copy(io.Discard, outR)
	select {
	case c := <-code:
		assert.Equal(t, exitOK, c)
		assert.Empty(t, errOut.String())
	case <-time.After(10 * time.Second):
		t.Fatal("card fake-agent did not exit when its stdin closed")
	}
}

func TestCardFakeAgentPrintsItsVersionForDetection(t *testing.T) {
	code, out, errOut := runCLI(fakeAgentCommand, "--version")
	assert.Equal(t, exitOK, code)
	assert.Empty(t, errOut)
	assert.Regexp(t, `^card-fake-agent 0\.1\.0-dev\n$`, out)
}

// It is for card serve --fake-agents to run, not for a person to type.
func TestCardFakeAgentIsNotInTheHelp(t *testing.T) {
	_, out, _ := runCLI("help")
	assert.NotContains(t, out, "fake-agent")
	assert.Contains(t, out, "serve")
}

func TestTheFakeAgentsAreCardItselfShadowNoBuiltInAndKeepSessionsInTheHome(t *testing.T) {
	exe, home := "/opt/card/bin/card", "/home/me/.local/state/card"
	decls := fakeAgentDecls(exe, home)
	require.NotEmpty(t, decls)
	for _, d := range decls {
		_, builtIn := agent.Lookup(d.ID)
		assert.False(t, builtIn, "%s shadows a built-in adapter", d.ID)
		assert.Equal(t, []string{exe, fakeAgentCommand}, d.Command[:2], "every fake agent is card's own binary")
		assert.Contains(t, d.Command, "--no-sign-in")
		assert.Equal(t, []string{fakeAgentCommand, "--version"}, d.VersionArgs)
		assert.Equal(t, map[string]string{fakeagent.StateEnv: filepath.Join(home, "fake-agents")}, d.Env)
		assert.NotEmpty(t, d.Name)
	}
	assert.Equal(t, "fake", decls[0].ID)
	pins := fakeAgentPins(exe, decls)
	assert.Equal(t, "CARD_AGENT_FAKE_BIN="+exe, pins[0])
	assert.Equal(t, "CARD_AGENT_FAKE_2_BIN="+exe, pins[1])
}
