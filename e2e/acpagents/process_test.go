package acpagents

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/acp"
	"github.com/card-dev/card/e2e/standin"
)

// lateWrite is a command that writes late.txt in its cwd after delay, and
// carries marker so the test can find its process. It is one node
// process, not `sleep N && …`: Qwen Code refuses a shell command that
// starts with a sleep.
func lateWrite(marker string, delay time.Duration) string {
	return fmt.Sprintf(`node -e "setTimeout(()=>require('fs').writeFileSync('late.txt','late'),%d) /*%s*/"`, delay.Milliseconds(), marker)
}

func newMarker(t *testing.T) string {
	b := make([]byte, 6)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return "card-marker-" + hex.EncodeToString(b)
}

// withMarker lists the processes whose command line holds marker.
func withMarker(marker string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), marker) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killMarked ends whatever a test left running with marker: a command an
// agent let outlive it must not outlive the test too.
func killMarked(marker string) {
	for _, pid := range withMarker(marker) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// modeRunningCommandsUnasked is the mode in which each agent runs the
// model's command without a question, so the tests below need no answer.
var modeRunningCommandsUnasked = map[string]string{"opencode": "build", "qwen": "yolo"}

// startLateWrite starts a turn whose model runs lateWrite and returns once
// the command's process is running.
func startLateWrite(t *testing.T, c agentCLI, marker string, delay time.Duration) (*agentProc, place, string, chan *acp.Message) {
	t.Helper()
	pl := newPlace(t)
	s := standin.NewOpenAI(t, standin.Script{Answer: "DONE", ToolCalls: []standin.ToolCall{c.shell(lateWrite(marker, delay))}})
	a := c.run(t, s, pl, nil, policy{answer: acp.PermissionRejectOnce})
	t.Cleanup(func() { killMarked(marker) })
	a.initialize()
	sid := a.newSession(pl.cwd).SessionID
	require.NoError(t, c.setMode(a, sid, modeRunningCommandsUnasked[c.name]))
	ch, err := a.request(acp.MethodSessionPrompt, acp.PromptRequest{SessionID: sid, Prompt: []acp.ContentBlock{acp.TextBlock("wait")}})
	require.NoError(t, err)
	a.waitUntil("the command's process", func() bool { return len(withMarker(marker)) > 0 })
	return a, pl, sid, ch
}

// session/cancel while the model's shell command runs ends the command as
// well as the turn: nothing it would have done later happens.
func TestCancelDuringAShellCommandEndsTheCommand(t *testing.T) {
	for _, c := range []agentCLI{opencode, qwen} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			marker := newMarker(t)
			delay := 8 * time.Second
			a, pl, sid, ch := startLateWrite(t, c, marker, delay)
			a.notify(acp.MethodSessionCancel, acp.CancelNotification{SessionID: sid})
			var res acp.PromptResponse
			require.NoError(t, a.wait(ch, acp.MethodSessionPrompt, &res))
			assert.Equal(t, acp.StopCancelled, res.StopReason)
			time.Sleep(delay + 2*time.Second)
			assert.Empty(t, withMarker(marker), "the command ended with the turn")
			assert.NoFileExists(t, filepath.Join(pl.cwd, "late.txt"))
			assert.True(t, a.groupAlive(), "the agent itself stays for the next prompt")
		})
	}
}

// SIGKILL of the agent's process group — how card ends a run past its
// deadline, and what happens to an agent whose daemon dies — leaves
// OpenCode's shell command running: OpenCode starts each command in a
// session of its own (setsid), outside the group, and it goes on to do
// what it would have done. Qwen Code's command is in a session of its own
// too, but on a pseudo-terminal Qwen Code holds, and dies with it.
func TestWhatAKillOfTheAgentsProcessGroupLeavesOfItsShellCommand(t *testing.T) {
	for _, c := range []struct {
		cli      agentCLI
		survives bool
	}{{opencode, true}, {qwen, false}} {
		t.Run(c.cli.name, func(t *testing.T) {
			t.Parallel()
			marker := newMarker(t)
			delay := 8 * time.Second
			a, pl, _, _ := startLateWrite(t, c.cli, marker, delay)
			// The command's processes (a shell and node, or node alone):
			// one leads a session and group of its own, and none is in
			// the agent's group.
			leads := false
			for _, pid := range withMarker(marker) {
				pgid, sid := groupAndSession(t, pid)
				assert.NotEqual(t, a.cmd.Process.Pid, pgid, "process %d is outside the agent's group", pid)
				leads = leads || pgid == pid && sid == pid
			}
			assert.True(t, leads, "the command runs in a session of its own")

			a.killGroup()
			time.Sleep(time.Second)
			left := withMarker(marker)
			time.Sleep(delay + time.Second)
			if c.survives {
				assert.NotEmpty(t, left, "the command outlived the agent's group")
				assert.FileExists(t, filepath.Join(pl.cwd, "late.txt"), "and wrote its file after the kill")
			} else {
				assert.Empty(t, left, "the command died with the agent")
				assert.NoFileExists(t, filepath.Join(pl.cwd, "late.txt"))
			}
		})
	}
}

// groupAndSession are a process's group and session ids, from
// /proc/<pid>/stat (after the command name: state, ppid, pgrp, session).
func groupAndSession(t *testing.T, pid int) (pgid, sid int) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	require.NoError(t, err)
	i := strings.LastIndexByte(string(b), ')')
	require.Positive(t, i)
	f := strings.Fields(string(b)[i+1:])
	require.GreaterOrEqual(t, len(f), 4)
	pgid, err = strconv.Atoi(f[2])
	require.NoError(t, err)
	sid, err = strconv.Atoi(f[3])
	require.NoError(t, err)
	return pgid, sid
}

// listeningPorts are the TCP ports pid listens on, from the socket inodes
// among its fds and /proc/net/tcp.
func listeningPorts(t *testing.T, pid int) []int {
	t.Helper()
	inodes := map[string]bool{}
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	for _, fd := range fds {
		link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && strings.HasPrefix(link, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = true
		}
	}
	f, err := os.Open("/proc/net/tcp")
	require.NoError(t, err)
	defer f.Close()
	var ports []int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		if len(fields) < 10 || fields[3] != "0A" || !inodes[fields[9]] {
			continue
		}
		_, hexPort, _ := strings.Cut(fields[1], ":")
		p, err := strconv.ParseInt(hexPort, 16, 32)
		if err == nil {
			ports = append(ports, int(p))
		}
	}
	return ports
}

// `opencode acp` runs OpenCode's HTTP server on loopback for its own ACP
// layer — the API that lists, prompts and runs commands in its sessions.
// With OPENCODE_SERVER_PASSWORD unset anyone on the machine can call it;
// with it set, only who has the password.
func TestOpenCodeServesItsAPIOnLoopbackOpenUnlessGivenAPassword(t *testing.T) {
	for _, c := range []struct {
		name     string
		password bool
		want     int
	}{{"with password", true, http.StatusUnauthorized}, {"without", false, http.StatusOK}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := standin.NewOpenAI(t, standin.Script{})
			pl := newPlace(t)
			bin := standin.CLI(t, "opencode")
			env := opencode.env(t, s, pl.home, nil)
			if !c.password {
				kept := env[:0]
				for _, kv := range env {
					if !strings.HasPrefix(kv, "OPENCODE_SERVER_PASSWORD=") {
						kept = append(kept, kv)
					}
				}
				env = kept
			}
			a := start(t, bin, opencode.args, pl.cwd, pl.home, env, policy{})
			a.initialize()
			sid := a.newSession(pl.cwd).SessionID
			var ports []int
			a.waitUntil("a listening port", func() bool {
				ports = listeningPorts(t, a.cmd.Process.Pid)
				return len(ports) > 0
			})
			url := fmt.Sprintf("http://127.0.0.1:%d/session", ports[0])
			resp, err := http.Get(url)
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, c.want, resp.StatusCode, "GET %s with no credentials", url)
			req, err := http.NewRequest(http.MethodGet, url, nil)
			require.NoError(t, err)
			req.SetBasicAuth("opencode", standin.OpenCodePassword)
			resp, err = http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode)
			var b strings.Builder
			_, _ = bufio.NewReader(resp.Body).WriteTo(&b)
			assert.Contains(t, b.String(), sid, "the API lists the ACP session")
		})
	}
}
