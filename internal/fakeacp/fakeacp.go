// Package fakeacp is an agent that speaks the Agent Client Protocol on its
// stdio and nothing else, for tests of an agent declared in card.toml: card
// knows no more of it than ACP says, as of any agent an operator declares.
//
// It keeps each session's prompts in a file under $HOME/.fakeacp, so a
// later process continues it with session/load (which replays it). A
// prompt is a script, one step per line:
//
//	WRITE <path> <text>   announce an edit of path, ask permission, write it if allowed
//	RUN <command>         announce an execute, ask permission, run it with sh if allowed
//	SLEEP <seconds>       wait, until then or a session/cancel (which leaves
//	                      $HOME/.fakeacp/cancelled-<session id>)
//	READ <path>           read path through the client (fs/read_text_file)
//	FSWRITE <path> <text> write path through the client (fs/write_text_file), unasked
//	ASKFSWRITE <path> <text> ask permission to edit path, then write it through the client if allowed
//	MODE                  say the session's mode (session/set_mode sets it)
//	HOW                   say how the session was opened: new, load or resume
//	COST <usd>            send a usage_update with the session's cost so far
//	METAUSAGE             report the turn's usage in the last chunk's _meta, not the result
//	anything else         said back
//
// It answers "turn N: <the prompt's last plain line>" with N the session's
// prompt count, then a line per step's outcome, and reports usage 10/5 per
// prompt in the result.
//
// Its environment shapes what it advertises: FAKEACP_MODES (comma-separated
// mode ids, the first current) makes session/new, load and resume offer
// modes; FAKEACP_RESUME=1 advertises sessionCapabilities.resume.
//
// A test binary becomes the fake by calling Main from TestMain when EnvVar
// is set; Install writes the executable wrapper that sets it.
package fakeacp

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// EnvVar makes a test binary act as the fake (see Install).
const EnvVar = "CARD_TEST_FAKE_ACP"

// Version is what --version prints.
const Version = "0.4.2"

// Install writes an executable named name into dir that runs the current
// test binary as the fake, and returns its path.
func Install(t testing.TB, dir, name string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatalf("fakeacp: find the test binary: %v", err)
	}
	path := filepath.Join(dir, name)
	script := fmt.Sprintf("#!/bin/sh\n%s=1 exec %q \"$@\"\n", EnvVar, self)
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatalf("fakeacp: write %s: %v", path, err)
	}
	return path
}

type msg struct {
	JSONRPC string           `json:"jsonrpc"`
	ID      *json.RawMessage `json:"id,omitempty"`
	Method  string           `json:"method,omitempty"`
	Params  json.RawMessage  `json:"params,omitempty"`
	Result  any              `json:"result,omitempty"`
	Error   any              `json:"error,omitempty"`
}

type agent struct {
	outMu   sync.Mutex
	out     *bufio.Writer
	mu      sync.Mutex
	nextID  int
	pending map[string]chan reply
	cancel  map[string]chan struct{}
	state   string
	fs      bool              // the client declared fs read and write
	modes   map[string]string // each session's current mode
	how     map[string]string // how each session was opened
}

// Main runs the fake on stdin and stdout and returns its exit code.
func Main() int {
	for _, a := range os.Args[1:] {
		if a == "--version" {
			fmt.Println("fakeacp " + Version)
			return 0
		}
	}
	home, _ := os.UserHomeDir()
	a := &agent{out: bufio.NewWriter(os.Stdout), pending: map[string]chan reply{}, cancel: map[string]chan struct{}{},
		state: filepath.Join(home, ".fakeacp"), modes: map[string]string{}, how: map[string]string{}}
	_ = os.MkdirAll(a.state, 0o700)
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	var wg sync.WaitGroup
	for sc.Scan() {
		var m struct {
			ID     *json.RawMessage `json:"id"`
			Method string           `json:"method"`
			Params json.RawMessage  `json:"params"`
			Result json.RawMessage  `json:"result"`
			Error  *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			continue
		}
		if m.Method == "" && m.ID != nil {
			a.mu.Lock()
			ch := a.pending[string(*m.ID)]
			delete(a.pending, string(*m.ID))
			a.mu.Unlock()
			if ch != nil {
				r := reply{result: m.Result}
				if m.Error != nil {
					r.err = m.Error.Message
					if r.err == "" {
						r.err = "error"
					}
				}
				ch <- r
			}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.serve(m.ID, m.Method, m.Params)
		}()
	}
	wg.Wait()
	return 0
}

func (a *agent) send(m msg) {
	m.JSONRPC = "2.0"
	b, _ := json.Marshal(m)
	a.outMu.Lock()
	defer a.outMu.Unlock()
	_, _ = a.out.Write(append(b, '\n'))
	_ = a.out.Flush()
}

func (a *agent) update(sid string, u map[string]any) {
	b, _ := json.Marshal(map[string]any{"sessionId": sid, "update": u})
	a.send(msg{Method: "session/update", Params: b})
}

// reply is the client's answer to one of the fake's requests.
type reply struct {
	result json.RawMessage
	err    string
}

func (a *agent) call(method string, params any) json.RawMessage {
	return a.callFull(method, params).result
}

func (a *agent) callFull(method string, params any) reply {
	a.mu.Lock()
	a.nextID++
	id := json.RawMessage(strconv.Itoa(a.nextID))
	ch := make(chan reply, 1)
	a.pending[string(id)] = ch
	a.mu.Unlock()
	b, _ := json.Marshal(params)
	a.send(msg{ID: &id, Method: method, Params: b})
	return <-ch
}

func (a *agent) serve(id *json.RawMessage, method string, params json.RawMessage) {
	reply := func(result any) { a.send(msg{ID: id, Result: result}) }
	fail := func(code int, message string) {
		a.send(msg{ID: id, Error: map[string]any{"code": code, "message": message}})
	}
	var p struct {
		SessionID string `json:"sessionId"`
		ModeID    string `json:"modeId"`
		Cwd       string `json:"cwd"`
		Caps      struct {
			FS struct {
				Read  bool `json:"readTextFile"`
				Write bool `json:"writeTextFile"`
			} `json:"fs"`
		} `json:"clientCapabilities"`
		Prompt []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"prompt"`
	}
	_ = json.Unmarshal(params, &p)
	switch method {
	case "initialize":
		a.mu.Lock()
		a.fs = p.Caps.FS.Read && p.Caps.FS.Write
		a.mu.Unlock()
		caps := map[string]any{"loadSession": true, "promptCapabilities": map[string]any{"image": os.Getenv("FAKEACP_NOIMAGE") == ""}}
		if os.Getenv("FAKEACP_RESUME") == "1" {
			caps["sessionCapabilities"] = map[string]any{"resume": map[string]any{}}
		}
		reply(map[string]any{"protocolVersion": 1, "agentCapabilities": caps,
			"authMethods": []any{}, "agentInfo": map[string]any{"name": "fakeacp", "version": Version}})
	case "session/new":
		sid := fmt.Sprintf("fake-%d", time.Now().UnixNano())
		_ = os.WriteFile(filepath.Join(a.state, sid), nil, 0o600)
		reply(a.opened(sid, "new", map[string]any{"sessionId": sid}))
	case "session/load", "session/resume":
		b, err := os.ReadFile(filepath.Join(a.state, filepath.Base(p.SessionID)))
		if err != nil {
			fail(-32002, "no session "+p.SessionID)
			return
		}
		if method == "session/load" {
			for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				if line != "" {
					a.update(p.SessionID, map[string]any{"sessionUpdate": "user_message_chunk", "content": map[string]any{"type": "text", "text": line}})
				}
			}
		} else if os.Getenv("FAKEACP_RESUME") != "1" {
			fail(-32601, "method not found: "+method)
			return
		}
		reply(a.opened(p.SessionID, strings.TrimPrefix(method, "session/"), map[string]any{}))
	case "session/set_mode":
		a.mu.Lock()
		_, known := a.modes[p.SessionID]
		ok := known && slices.Contains(strings.Split(os.Getenv("FAKEACP_MODES"), ","), p.ModeID)
		if ok {
			a.modes[p.SessionID] = p.ModeID
		}
		a.mu.Unlock()
		if !ok {
			fail(-32602, "Invalid params: mode not found: "+p.ModeID)
			return
		}
		reply(map[string]any{})
	case "session/cancel":
		// Said on disk, so a test sees the cancel came before any kill.
		_ = os.WriteFile(filepath.Join(a.state, "cancelled-"+filepath.Base(p.SessionID)), nil, 0o600)
		a.mu.Lock()
		if ch := a.cancel[p.SessionID]; ch != nil {
			close(ch)
			delete(a.cancel, p.SessionID)
		}
		a.mu.Unlock()
	case "session/prompt":
		reply(a.prompt(p.SessionID, p.Cwd, p.Prompt))
	default:
		if id != nil {
			fail(-32601, "method not found: "+method)
		}
	}
}

// opened records how a session was opened and adds the modes it offers,
// when FAKEACP_MODES names some, to its answer.
func (a *agent) opened(sid, how string, answer map[string]any) map[string]any {
	ids := strings.Split(os.Getenv("FAKEACP_MODES"), ",")
	a.mu.Lock()
	defer a.mu.Unlock()
	a.how[sid] = how
	if ids[0] == "" {
		return answer
	}
	// Every opening starts in the first mode, as Qwen Code's resume does.
	a.modes[sid] = ids[0]
	avail := make([]any, 0, len(ids))
	for _, id := range ids {
		avail = append(avail, map[string]any{"id": id, "name": id})
	}
	answer["modes"] = map[string]any{"currentModeId": ids[0], "availableModes": avail}
	return answer
}

func (a *agent) prompt(sid, _ string, blocks []struct {
	Type string `json:"type"`
	Text string `json:"text"`
}) map[string]any {
	text := ""
	for _, b := range blocks {
		if b.Type == "text" {
			text += b.Text
		}
	}
	file := filepath.Join(a.state, filepath.Base(sid))
	f, err := os.OpenFile(file, os.O_APPEND|os.O_WRONLY, 0o600)
	if err == nil {
		_, _ = f.WriteString(strings.ReplaceAll(text, "\n", " ") + "\n")
		_ = f.Close()
	}
	hist, _ := os.ReadFile(file)
	turns := strings.Count(string(hist), "\n")
	stop := make(chan struct{})
	a.mu.Lock()
	a.cancel[sid] = stop
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		if a.cancel[sid] == stop {
			delete(a.cancel, sid)
		}
		a.mu.Unlock()
	}()
	var said, outcomes []string
	metaUsage := false
	for i, line := range strings.Split(text, "\n") {
		word, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
		switch word {
		case "WRITE", "RUN", "ASKFSWRITE":
			outcomes = append(outcomes, a.tool(sid, fmt.Sprintf("call-%d", i), word, rest))
		case "READ", "FSWRITE":
			outcomes = append(outcomes, a.fsCall(sid, word, rest))
		case "MODE":
			a.mu.Lock()
			outcomes = append(outcomes, "MODE "+a.modes[sid])
			a.mu.Unlock()
		case "HOW":
			a.mu.Lock()
			outcomes = append(outcomes, "HOW "+a.how[sid])
			a.mu.Unlock()
		case "COST":
			usd, _ := strconv.ParseFloat(rest, 64)
			a.update(sid, map[string]any{"sessionUpdate": "usage_update", "used": 1000, "size": 200000, "cost": map[string]any{"amount": usd, "currency": "USD"}})
		case "METAUSAGE":
			metaUsage = true
		case "SLEEP":
			n, _ := strconv.Atoi(rest)
			select {
			case <-time.After(time.Duration(n) * time.Second):
			case <-stop:
				return map[string]any{"stopReason": "cancelled"}
			}
		default:
			if strings.TrimSpace(line) != "" {
				said = append(said, strings.TrimSpace(line))
			}
		}
	}
	last := ""
	if len(said) > 0 {
		last = said[len(said)-1]
	}
	answer := fmt.Sprintf("turn %d: %s", turns, last)
	for _, o := range outcomes {
		answer += "\n" + o
	}
	a.update(sid, map[string]any{"sessionUpdate": "agent_message_chunk", "content": map[string]any{"type": "text", "text": answer}})
	usage := map[string]any{"inputTokens": 10, "outputTokens": 5, "totalTokens": 15}
	if metaUsage {
		// As Qwen Code reports it: an empty last chunk whose _meta holds
		// the turn's usage, and none in the result.
		a.update(sid, map[string]any{"sessionUpdate": "agent_message_chunk", "content": map[string]any{"type": "text", "text": ""},
			"_meta": map[string]any{"usage": usage, "durationMs": 5}})
		return map[string]any{"stopReason": "end_turn"}
	}
	return map[string]any{"stopReason": "end_turn", "usage": usage}
}

// tool runs a WRITE or RUN line as an agent's own tool call: announced,
// asked for through session/request_permission, done only when allowed.
// ASKFSWRITE is an edit asked for the same way and then written through
// the client's fs/write_text_file, as Qwen Code does.
func (a *agent) tool(sid, callID, word, rest string) string {
	kind, title, locs := "edit", "write "+rest, []any{}
	path, body, _ := strings.Cut(rest, " ")
	if word == "RUN" {
		kind, title = "execute", rest
	} else {
		locs = append(locs, map[string]any{"path": path})
	}
	a.update(sid, map[string]any{"sessionUpdate": "tool_call", "toolCallId": callID, "title": title, "kind": kind, "status": "pending", "locations": locs})
	res := a.call("session/request_permission", map[string]any{"sessionId": sid,
		"toolCall": map[string]any{"toolCallId": callID, "title": title, "kind": kind, "locations": locs},
		"options":  []any{map[string]any{"optionId": "yes", "name": "Allow", "kind": "allow_once"}, map[string]any{"optionId": "no", "name": "Reject", "kind": "reject_once"}}})
	var r struct {
		Outcome struct {
			Outcome  string `json:"outcome"`
			OptionID string `json:"optionId"`
		} `json:"outcome"`
	}
	_ = json.Unmarshal(res, &r)
	if r.Outcome.OptionID != "yes" {
		a.update(sid, map[string]any{"sessionUpdate": "tool_call_update", "toolCallId": callID, "status": "failed"})
		return word + " denied"
	}
	var err error
	switch word {
	case "ASKFSWRITE":
		if r := a.callFull("fs/write_text_file", map[string]any{"sessionId": sid, "path": path, "content": body}); r.err != "" {
			err = errors.New(r.err)
		}
	case "WRITE":
		err = os.WriteFile(path, []byte(body), 0o644)
	default:
		err = exec.Command("sh", "-c", rest).Run()
	}
	a.update(sid, map[string]any{"sessionUpdate": "tool_call_update", "toolCallId": callID, "status": "completed"})
	return fmt.Sprintf("%s done (%v)", word, err)
}

// fsCall runs a READ or FSWRITE line through the client's fs methods, which
// it may call only when the client declared them.
func (a *agent) fsCall(sid, word, rest string) string {
	a.mu.Lock()
	declared := a.fs
	a.mu.Unlock()
	if !declared {
		return word + " skipped: the client declared no fs"
	}
	if word == "FSWRITE" {
		path, body, _ := strings.Cut(rest, " ")
		r := a.callFull("fs/write_text_file", map[string]any{"sessionId": sid, "path": path, "content": body})
		if r.err != "" {
			return "FSWRITE error: " + r.err
		}
		return "FSWRITE ok"
	}
	r := a.callFull("fs/read_text_file", map[string]any{"sessionId": sid, "path": rest})
	var c struct {
		Content string `json:"content"`
	}
	_ = json.Unmarshal(r.result, &c)
	if r.err != "" {
		return "READ error: " + r.err
	}
	return "READ " + c.Content
}
