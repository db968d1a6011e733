package acpagents

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/acp"
	"github.com/card-dev/card/internal/proc"
)

// callTimeout bounds one request to an agent. Startup takes 5–15 s on this
// 2-CPU machine, a turn a few more.
const callTimeout = 120 * time.Second

// policy is how the test's client answers what an agent asks of it.
type policy struct {
	// answer is the kind of option picked for session/request_permission;
	// with no option of that kind offered, the answer is cancelled.
	answer acp.PermissionOptionKind
	// fs declares fs.readTextFile and fs.writeTextFile in initialize.
	// Reads are then served from disk and every write is refused with an
	// error, so a test sees whether a write the agent makes goes through
	// its client (no file) or around it (a file).
	fs bool
	// terminal declares the terminal capability; every terminal/create is
	// refused, likewise.
	terminal bool
}

// agentProc is one agent CLI running as an ACP agent on stdio, with this
// test as its client: its own process group, an explicit cwd and a
// complete env, as card runs an agent.
type agentProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	w      *acp.Writer
	stderr *proc.Capped
	pol    policy
	home   string
	done   chan struct{} // closed when stdout ends

	mu      sync.Mutex
	nextID  int
	pending map[string]chan *acp.Message
	trace   []string
	updates []acp.SessionNotification
	asked   []*acp.Message // the agent's requests to the client, in order
	notes   []*acp.Message // notifications other than session/update
}

// start runs bin with args in dir, reads its stdout as ACP and answers its
// requests by pol. Cleanup closes stdin, kills the group and waits for
// the reader.
func start(t *testing.T, bin string, args []string, dir, home string, env []string, pol policy) *agentProc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.SysProcAttr = proc.NewGroup()
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	a := &agentProc{t: t, cmd: cmd, stdin: stdin, w: acp.NewWriter(stdin), stderr: &proc.Capped{Head: 1 << 20},
		pol: pol, home: home, done: make(chan struct{}), pending: map[string]chan *acp.Message{}}
	cmd.Stderr = a.stderr
	require.NoError(t, cmd.Start(), "start %s", bin)
	go a.read(stdout)
	t.Cleanup(func() {
		_ = a.stdin.Close()
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-a.done
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("%s stderr:\n%s", filepath.Base(bin), a.stderr.String())
		}
	})
	return a
}

func (a *agentProc) log(dir, line string) {
	a.mu.Lock()
	a.trace = append(a.trace, dir+" "+line)
	a.mu.Unlock()
}

func (a *agentProc) send(m *acp.Message) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	a.log("→", string(b))
	return a.w.Write(json.RawMessage(b))
}

// read dispatches every line the agent writes until its stdout ends.
func (a *agentProc) read(stdout io.Reader) {
	defer close(a.done)
	r := acp.NewReader(stdout, 16<<20)
	for {
		m, err := r.Read()
		var nm *acp.NotMessageError
		switch {
		case errors.As(err, &nm):
			a.log("←", "(not ACP) "+string(nm.Line))
			continue
		case errors.Is(err, acp.ErrLineTooLong):
			a.log("←", "(line over 16 MiB)")
			continue
		case err != nil:
			return
		}
		b, _ := json.Marshal(m)
		a.log("←", string(b))
		switch {
		case m.IsResponse():
			a.mu.Lock()
			ch := a.pending[string(m.ID)]
			delete(a.pending, string(m.ID))
			a.mu.Unlock()
			if ch != nil {
				ch <- m
			}
		case m.IsRequest():
			a.mu.Lock()
			a.asked = append(a.asked, m)
			a.mu.Unlock()
			go a.answer(m)
		case m.Method == acp.MethodSessionUpdate:
			var n acp.SessionNotification
			if json.Unmarshal(m.Params, &n) == nil {
				a.mu.Lock()
				a.updates = append(a.updates, n)
				a.mu.Unlock()
			}
		default:
			a.mu.Lock()
			a.notes = append(a.notes, m)
			a.mu.Unlock()
		}
	}
}

// answer replies to one request of the agent's, by the policy.
func (a *agentProc) answer(m *acp.Message) {
	var result any
	var rpcErr *acp.Error
	switch m.Method {
	case acp.MethodSessionRequestPermission:
		var req acp.RequestPermissionRequest
		_ = json.Unmarshal(m.Params, &req)
		result = acp.Cancelled()
		for _, o := range req.Options {
			if o.Kind == a.pol.answer {
				result = acp.Selected(o.OptionID)
				break
			}
		}
	case acp.MethodFSReadTextFile:
		var req acp.ReadTextFileRequest
		_ = json.Unmarshal(m.Params, &req)
		b, err := os.ReadFile(req.Path)
		if err != nil {
			rpcErr = &acp.Error{Code: acp.CodeResourceNotFound, Message: "no such file: " + req.Path}
		} else {
			result = acp.ReadTextFileResponse{Content: string(b)}
		}
	case acp.MethodFSWriteTextFile:
		rpcErr = &acp.Error{Code: acp.CodeInternalError, Message: "the test's client refuses every write"}
	case acp.MethodTerminalCreate:
		rpcErr = &acp.Error{Code: acp.CodeInternalError, Message: "the test's client refuses every command"}
	default:
		rpcErr = &acp.Error{Code: acp.CodeMethodNotFound, Message: "the test's client does not serve " + m.Method}
	}
	resp, err := acp.Response(m.ID, result, rpcErr)
	if err == nil {
		_ = a.send(resp)
	}
}

// call sends a request and decodes its result into out (nil to ignore);
// an error answer comes back as *acp.Error.
func (a *agentProc) call(method string, params, out any) error {
	a.t.Helper()
	ch, err := a.request(method, params)
	if err != nil {
		return err
	}
	return a.wait(ch, method, out)
}

// request sends a request and returns where its answer will arrive.
func (a *agentProc) request(method string, params any) (chan *acp.Message, error) {
	a.mu.Lock()
	a.nextID++
	id := json.RawMessage(strconv.Itoa(a.nextID))
	ch := make(chan *acp.Message, 1)
	a.pending[string(id)] = ch
	a.mu.Unlock()
	m, err := acp.Request(id, method, params)
	if err != nil {
		return nil, err
	}
	return ch, a.send(m)
}

func (a *agentProc) wait(ch chan *acp.Message, method string, out any) error {
	select {
	case m := <-ch:
		if m.Error != nil {
			return m.Error
		}
		if out != nil {
			return json.Unmarshal(m.Result, out)
		}
		return nil
	case <-a.done:
		return fmt.Errorf("%s: the agent's stdout ended before it answered", method)
	case <-time.After(callTimeout):
		return fmt.Errorf("%s: no answer in %s", method, callTimeout)
	}
}

func (a *agentProc) notify(method string, params any) {
	a.t.Helper()
	m, err := acp.Notification(method, params)
	require.NoError(a.t, err)
	require.NoError(a.t, a.send(m))
}

// initialize opens the connection with the policy's capabilities.
func (a *agentProc) initialize() acp.InitializeResponse {
	a.t.Helper()
	var res acp.InitializeResponse
	require.NoError(a.t, a.call(acp.MethodInitialize, acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersion,
		ClientCapabilities: acp.ClientCapabilities{
			FS:       acp.FileSystemCapabilities{ReadTextFile: a.pol.fs, WriteTextFile: a.pol.fs},
			Terminal: a.pol.terminal,
		}}, &res))
	return res
}

func (a *agentProc) newSession(cwd string) acp.NewSessionResponse {
	a.t.Helper()
	var res acp.NewSessionResponse
	require.NoError(a.t, a.call(acp.MethodSessionNew, acp.NewSessionRequest{Cwd: cwd}, &res))
	require.NotEmpty(a.t, res.SessionID)
	return res
}

// prompt runs one turn to its end.
func (a *agentProc) prompt(sid, text string) acp.PromptResponse {
	a.t.Helper()
	var res acp.PromptResponse
	require.NoError(a.t, a.call(acp.MethodSessionPrompt, acp.PromptRequest{SessionID: sid, Prompt: []acp.ContentBlock{acp.TextBlock(text)}}, &res))
	return res
}

// snapshot copies what the agent has sent so far.
func (a *agentProc) snapshot() (updates []acp.SessionNotification, asked []*acp.Message) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]acp.SessionNotification(nil), a.updates...), append([]*acp.Message(nil), a.asked...)
}

// text is what the agent said in sid since update from (its
// agent_message_chunk text, joined).
func (a *agentProc) text(sid string, from int) string {
	ups, _ := a.snapshot()
	var b strings.Builder
	for _, u := range ups[min(from, len(ups)):] {
		if u.SessionID == sid && u.Update.Kind == acp.UpdateAgentMessageChunk && u.Update.Chunk != nil {
			b.WriteString(u.Update.Chunk.Content.Text)
		}
	}
	return b.String()
}

// waitUntil polls cond until it holds or the call timeout passes.
func (a *agentProc) waitUntil(what string, cond func() bool) {
	a.t.Helper()
	deadline := time.Now().Add(callTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			a.t.Fatalf("waited %s for %s", callTimeout, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// closeStdin ends the connection the way card ends an idle agent and
// returns how the agent exited and how long it took.
func (a *agentProc) closeStdin(grace time.Duration) (exit int, took time.Duration, exited bool) {
	a.t.Helper()
	begin := time.Now()
	_ = a.stdin.Close()
	waited := make(chan struct{})
	go func() {
		<-a.done
		_ = a.cmd.Wait()
		close(waited)
	}()
	select {
	case <-waited:
		return a.cmd.ProcessState.ExitCode(), time.Since(begin), true
	case <-time.After(grace):
		_ = syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL)
		<-waited
		return -1, time.Since(begin), false
	}
}

// capture writes the conversation under $CARD_ACPAGENTS_CAPTURE (when set)
// as <name>.trace, one message a line ("→" the client's, "←" the agent's),
// and its stderr, with the temp HOME written /home/user as in the other
// fixtures and each available_commands_update cut to the commands' names
// (cutCommands).
func (a *agentProc) capture(name string) {
	dir := os.Getenv("CARD_ACPAGENTS_CAPTURE")
	if dir == "" {
		return
	}
	require.NoError(a.t, os.MkdirAll(dir, 0o755))
	a.mu.Lock()
	lines := append([]string(nil), a.trace...)
	a.mu.Unlock()
	for i, l := range lines {
		lines[i] = cutCommands(l)
	}
	text := strings.Join(lines, "\n") + "\n"
	scrub := func(s string) string {
		s = strings.ReplaceAll(s, a.home, "/home/user")
		// Qwen Code names a project's files after its path with dashes.
		dashed := strings.Map(func(r rune) rune {
			if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
				return r
			}
			return '-'
		}, a.home)
		s = strings.ReplaceAll(s, dashed, "-home-user")
		// OpenCode's titles name a path without its leading slash.
		s = strings.ReplaceAll(s, strings.TrimPrefix(a.home, "/"), "home/user")
		if mods, err := filepath.Abs(filepath.Join("..", "agents", "node_modules")); err == nil {
			s = strings.ReplaceAll(s, mods, "/usr/lib/node_modules")
		}
		return s
	}
	require.NoError(a.t, os.WriteFile(filepath.Join(dir, name+".trace"), []byte(scrub(text)), 0o644))
	if e := strings.TrimSpace(a.stderr.String()); e != "" {
		require.NoError(a.t, os.WriteFile(filepath.Join(dir, name+".stderr"), []byte(scrub(e)+"\n"), 0o644))
	}
}

// cutCommands shortens an available_commands_update to its commands'
// names: Qwen Code's lists every skill with its whole text, half a
// megabyte a line, which says nothing a fixture needs.
func cutCommands(line string) string {
	raw, ok := strings.CutPrefix(line, "← ")
	if !ok || !strings.Contains(raw, `"available_commands_update"`) {
		return line
	}
	var m struct {
		JSONRPC string `json:"jsonrpc"`
		Method  string `json:"method"`
		Params  struct {
			SessionID string `json:"sessionId"`
			Update    struct {
				SessionUpdate     string `json:"sessionUpdate"`
				AvailableCommands []struct {
					Name string `json:"name"`
				} `json:"availableCommands"`
			} `json:"update"`
		} `json:"params"`
	}
	if json.Unmarshal([]byte(raw), &m) != nil {
		return line
	}
	b, err := json.Marshal(m)
	if err != nil {
		return line
	}
	return "← " + string(b)
}

// groupAlive says whether any process is left in the agent's group.
func (a *agentProc) groupAlive() bool {
	return syscall.Kill(-a.cmd.Process.Pid, 0) == nil
}

// killGroup SIGKILLs the agent's process group, as card ends a run.
func (a *agentProc) killGroup() {
	_ = syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL)
}
