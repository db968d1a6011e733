package spawn

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/card-dev/card/acp"
)

// fakeClaudeWarm is Claude Code's stream-json conversation as the real CLI
// speaks it: one turn per stdin user message, each answered with an init
// line, the text "You said: <prompt> (turn N, pid P)" and its own result,
// one session id throughout. A prompt says what the turn does:
//
//	"wait ..."        answers nothing until an interrupt control request,
//	                  then ends the turn with an error result.
//	"deaf ..."        answers nothing, and ignores the interrupt.
//	"flood ..."       prints without end.
//	"exit ..."        answers, then exits before the next turn.
//	"grandchild ..."  starts a grandchild (its pid in grandchild.pid) and answers.
//	"write PATH"      answers, as if its read-only tools had refused it.
func fakeClaudeWarm(string) int {
	const sid = "5f0c7e4a-1111-4222-8333-944455556666"
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	emit := func(v any) {
		mu.Lock()
		defer mu.Unlock()
		b, _ := json.Marshal(v)
		out.Write(append(b, '\n'))
		out.Flush()
	}
	turns := 0
	// The cost is the process's so far, as Claude reports it.
	result := func(text string, isErr bool, subtype string, turn int) {
		emit(map[string]any{"type": "result", "subtype": subtype, "is_error": isErr, "result": text, "session_id": sid, "num_turns": 1,
			"total_cost_usd": 0.25 * float64(turn), "usage": map[string]any{"input_tokens": 3, "output_tokens": 2}})
	}
	interrupted := make(chan struct{}, 1)
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 64<<20)
	for in.Scan() {
		var m struct {
			Type    string `json:"type"`
			Request struct {
				Subtype string `json:"subtype"`
			} `json:"request"`
			RequestID string `json:"request_id"`
			Message   struct {
				Content []struct {
					Type string `json:"type"`
					Text string `json:"text"`
				} `json:"content"`
			} `json:"message"`
		}
		if json.Unmarshal(in.Bytes(), &m) != nil {
			continue
		}
		if m.Type == "control_request" && m.Request.Subtype == "initialize" {
			// As Claude Code answers it: the commands with what init's
			// slash_commands leaves out.
			emit(map[string]any{"type": "control_response", "response": map[string]any{"subtype": "success", "request_id": m.RequestID,
				"response": map[string]any{"commands": []any{
					map[string]any{"name": "compact", "description": "Clear conversation history but keep a summary in context", "argumentHint": "<optional custom summarization instructions>"},
					map[string]any{"name": "review", "description": "Review a pull request", "argumentHint": ""}}}}})
			continue
		}
		if m.Type == "control_request" && m.Request.Subtype == "interrupt" {
			emit(map[string]any{"type": "control_response", "response": map[string]any{"subtype": "success", "request_id": m.RequestID}})
			select {
			case interrupted <- struct{}{}:
			default:
			}
			continue
		}
		if m.Type != "user" || len(m.Message.Content) == 0 {
			continue
		}
		turns++
		text := m.Message.Content[len(m.Message.Content)-1].Text
		emit(map[string]any{"type": "system", "subtype": "init", "session_id": sid, "model": "claude-fake", "slash_commands": []string{"compact", "review", "heapdump"}})
		switch verb, arg, _ := strings.Cut(text, " "); verb {
		case "wait":
			go func(turn int) {
				<-interrupted
				result("", true, "error_during_execution", turn)
			}(turns)
			continue
		case "deaf":
			continue
		case "flood":
			line := strings.Repeat("y", 1<<10) + "\n"
			for {
				if _, err := os.Stdout.WriteString(line); err != nil {
					os.Exit(1)
				}
			}
		case "grandchild":
			gc := exec.Command("sleep", "300")
			if gc.Start() == nil {
				_ = os.WriteFile("grandchild.pid", []byte(strconv.Itoa(gc.Process.Pid)), 0o600)
			}
		case "write":
			_ = arg // the fake's read-only tools write nothing
		case "stream", "gate":
			// "stream N": N text deltas "d " in one write, then the whole
			// message; "gate PATH": one delta, then, once PATH exists,
			// another.
			delta := func(text string) string {
				b, _ := json.Marshal(map[string]any{"type": "stream_event", "session_id": sid, "event": map[string]any{"type": "content_block_delta", "index": 0,
					"delta": map[string]any{"type": "text_delta", "text": text}}})
				return string(b) + "\n"
			}
			start, _ := json.Marshal(map[string]any{"type": "stream_event", "session_id": sid, "event": map[string]any{"type": "message_start",
				"message": map[string]any{"id": "msg_" + strconv.Itoa(turns)}}})
			emit(json.RawMessage(start))
			var whole string
			if verb == "stream" {
				n, _ := strconv.Atoi(arg)
				mu.Lock()
				out.WriteString(strings.Repeat(delta("d "), n))
				out.Flush()
				mu.Unlock()
				whole = strings.Repeat("d ", n)
			} else {
				emit(json.RawMessage(strings.TrimSpace(delta("first "))))
				for {
					if _, err := os.Stat(arg); err == nil {
						break
					}
					time.Sleep(10 * time.Millisecond)
				}
				emit(json.RawMessage(strings.TrimSpace(delta("second"))))
				whole = "first second"
			}
			emit(map[string]any{"type": "assistant", "session_id": sid, "message": map[string]any{"id": "msg_" + strconv.Itoa(turns), "model": "claude-fake",
				"content": []any{map[string]any{"type": "text", "text": whole}}}})
			result(whole, false, "success", turns)
			continue
		}
		answer := fmt.Sprintf("You said: %s (turn %d, pid %d)", text, turns, os.Getpid())
		emit(map[string]any{"type": "assistant", "session_id": sid, "message": map[string]any{"id": "msg_" + strconv.Itoa(turns), "model": "claude-fake",
			"content": []any{map[string]any{"type": "text", "text": answer}}}})
		result(answer, false, "success", turns)
		if strings.HasPrefix(text, "exit") {
			fmt.Fprintln(os.Stderr, "fake claude: leaving between turns")
			return 4
		}
	}
	return 0
}

// fakeACPWarm is an ACP agent kept across turns: initialize and session/new
// once, then each session/prompt answered "You said: <prompt> (turn N, pid
// P)". A prompt "wait ..." answers only once session/cancel comes (with
// stopReason cancelled), "deaf ..." never, "exit ..." answers and exits,
// "flood ..." prints without end, "grandchild ..." starts a grandchild.
func fakeACPWarm(string) int {
	ctx := context.Background()
	var mu sync.Mutex
	var waiting []*jsonrpc2.Request
	turns := 0
	var conn *jsonrpc2.Conn
	h := rpcHandler(func(ctx context.Context, c *jsonrpc2.Conn, req *jsonrpc2.Request) {
		switch req.Method {
		case "initialize":
			_ = c.Reply(ctx, req.ID, map[string]any{"protocolVersion": 1, "agentCapabilities": map[string]any{"loadSession": true, "promptCapabilities": map[string]any{"image": true}}})
		case "session/load":
			var p struct{ SessionID string }
			_ = json.Unmarshal(*req.Params, &p)
			turns = 10 // the loaded session's history, replayed as updates
			_ = c.Notify(ctx, "session/update", map[string]any{"sessionId": p.SessionID, "update": map[string]any{"sessionUpdate": "agent_message_chunk",
				"content": map[string]any{"type": "text", "text": "an old answer, replayed"}}})
			_ = c.Reply(ctx, req.ID, map[string]any{})
		case "session/new":
			_ = c.Reply(ctx, req.ID, map[string]any{"sessionId": "sess-warm", "models": map[string]any{"currentModelId": "fake-model"}})
			// As Gemini CLI does, once the answer is out: its commands.
			_ = c.Notify(ctx, "session/update", map[string]any{"sessionId": "sess-warm", "update": map[string]any{"sessionUpdate": "available_commands_update",
				"availableCommands": []any{map[string]any{"name": "memory", "description": "Manage memory."},
					map[string]any{"name": "extensions install", "description": "Install an extension from a git repo or local path."},
					map[string]any{"name": "init", "description": "Analyzes the project", "input": map[string]any{"hint": "[focus]"}}}}})
		case "session/cancel":
			mu.Lock()
			w := waiting
			waiting = nil
			mu.Unlock()
			for _, r := range w {
				_ = c.Reply(ctx, r.ID, map[string]any{"stopReason": "cancelled"})
			}
		case "session/prompt":
			var p acp.PromptRequest
			_ = json.Unmarshal(*req.Params, &p)
			turns++
			text := p.Prompt[len(p.Prompt)-1].Text
			verb, _, _ := strings.Cut(text, " ")
			switch verb {
			case "wait":
				mu.Lock()
				waiting = append(waiting, req)
				mu.Unlock()
				return
			case "deaf":
				return
			case "flood":
				line := strings.Repeat("y", 1<<10) + "\n"
				for {
					if _, err := os.Stdout.WriteString(line); err != nil {
						os.Exit(1)
					}
				}
			case "grandchild":
				gc := exec.Command("sleep", "300")
				if gc.Start() == nil {
					_ = os.WriteFile("grandchild.pid", []byte(strconv.Itoa(gc.Process.Pid)), 0o600)
				}
			case "stream", "gate":
				// "stream N": N chunks "d " as fast as it can write them;
				// "gate PATH": one chunk, then, once PATH exists, another.
				chunk := func(text string) {
					_ = c.Notify(ctx, "session/update", map[string]any{"sessionId": p.SessionID, "update": map[string]any{"sessionUpdate": "agent_message_chunk",
						"content": map[string]any{"type": "text", "text": text}}})
				}
				_, arg, _ := strings.Cut(text, " ")
				if verb == "stream" {
					n, _ := strconv.Atoi(arg)
					for range n {
						chunk("d ")
					}
				} else {
					chunk("first ")
					for {
						if _, err := os.Stat(arg); err == nil {
							break
						}
						time.Sleep(10 * time.Millisecond)
					}
					chunk("second")
				}
				_ = c.Reply(ctx, req.ID, map[string]any{"stopReason": "end_turn"})
				return
			}
			_ = c.Notify(ctx, "session/update", map[string]any{"sessionId": p.SessionID, "update": map[string]any{"sessionUpdate": "agent_message_chunk",
				"content": map[string]any{"type": "text", "text": fmt.Sprintf("You said: %s (turn %d, pid %d)", text, turns, os.Getpid())}}})
			_ = c.Reply(ctx, req.ID, map[string]any{"stopReason": "end_turn", "usage": map[string]any{"inputTokens": 4, "outputTokens": 2}})
			if verb == "exit" {
				fmt.Fprintln(os.Stderr, "fake acp: leaving between turns")
				os.Exit(4)
			}
		}
	})
	conn = jsonrpc2.NewConn(ctx, jsonrpc2.NewPlainObjectStream(stdio{}), h)
	<-conn.DisconnectNotify()
	return 0
}

// fakeCodexWarm is Codex's app-server kept across turns: initialize and
// thread/start once, then each turn/start answered "You said: <prompt>
// (turn N, pid P)" and turn/completed. A prompt "wait ..." completes only
// at turn/interrupt (status interrupted) or turn/steer (answering with
// the steered text), "deaf ..." never, "exit ..." answers and exits,
// "flood ..." prints without end, "grandchild ..." starts a grandchild.
func fakeCodexWarm(string) int {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	say := func(v any) {
		b, _ := json.Marshal(v)
		os.Stdout.Write(append(b, '\n'))
	}
	note := func(method string, params any) { say(map[string]any{"method": method, "params": params}) }
	turns := 0
	waiting := ""
	answer := func(tu, text string) {
		note("item/agentMessage/delta", map[string]any{"itemId": "msg-" + tu, "delta": text})
		note("item/completed", map[string]any{"item": map[string]any{"type": "agentMessage", "id": "msg-" + tu, "text": text}})
		note("thread/tokenUsage/updated", map[string]any{"tokenUsage": map[string]any{"total": map[string]any{"inputTokens": 10 * turns, "outputTokens": 2 * turns}}})
		note("turn/completed", map[string]any{"threadId": "th-warm", "turn": map[string]any{"id": tu, "status": "completed"}})
	}
	for in.Scan() {
		var m struct {
			ID     *int            `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		_ = json.Unmarshal(in.Bytes(), &m)
		id := 0
		if m.ID != nil {
			id = *m.ID
		}
		switch m.Method {
		case "initialize":
			say(map[string]any{"id": id, "result": map[string]any{"userAgent": "fake"}})
		case "thread/start":
			say(map[string]any{"id": id, "result": map[string]any{"thread": map[string]any{"id": "th-warm"}, "model": "gpt-fake"}})
		case "thread/resume":
			var p struct{ ThreadID, Sandbox, ApprovalPolicy string }
			_ = json.Unmarshal(m.Params, &p)
			turns = 10 // the resumed thread's history
			say(map[string]any{"id": id, "result": map[string]any{"thread": map[string]any{"id": p.ThreadID}, "model": "gpt-fake"}})
		case "turn/interrupt":
			say(map[string]any{"id": id, "result": map[string]any{}})
			if waiting != "" {
				note("turn/completed", map[string]any{"threadId": "th-warm", "turn": map[string]any{"id": waiting, "status": "interrupted"}})
				waiting = ""
			}
		case "turn/steer":
			var p struct {
				ExpectedTurnID string `json:"expectedTurnId"`
				Input          []struct{ Text string }
			}
			_ = json.Unmarshal(m.Params, &p)
			if p.ExpectedTurnID != waiting || waiting == "" {
				say(map[string]any{"id": id, "error": map[string]any{"code": -32600, "message": "no such turn"}})
				continue
			}
			say(map[string]any{"id": id, "result": map[string]any{"turnId": waiting}})
			answer(waiting, "steered: "+p.Input[0].Text)
			waiting = ""
		case "turn/start":
			var p struct {
				Input []struct{ Type, Text string }
			}
			_ = json.Unmarshal(m.Params, &p)
			turns++
			tu := "tu-" + strconv.Itoa(turns)
			say(map[string]any{"id": id, "result": map[string]any{"turn": map[string]any{"id": tu, "status": "inProgress"}}})
			text := p.Input[len(p.Input)-1].Text
			verb, _, _ := strings.Cut(text, " ")
			switch verb {
			case "wait":
				waiting = tu
				continue
			case "deaf":
				continue
			case "flood":
				line := strings.Repeat("y", 1<<10) + "\n"
				for {
					if _, err := os.Stdout.WriteString(line); err != nil {
						os.Exit(1)
					}
				}
			case "grandchild":
				gc := exec.Command("sleep", "300")
				if gc.Start() == nil {
					_ = os.WriteFile("grandchild.pid", []byte(strconv.Itoa(gc.Process.Pid)), 0o600)
				}
			}
			answer(tu, fmt.Sprintf("You said: %s (turn %d, pid %d)", text, turns, os.Getpid()))
			if verb == "exit" {
				fmt.Fprintln(os.Stderr, "fake codex: leaving between turns")
				os.Exit(4)
			}
		}
	}
	return 0
}

// fakePiWarm is Pi's RPC mode kept across turns: each prompt answered
// "You said: <prompt> (turn N, pid P)" and agent_end. A prompt "wait ..."
// ends only at abort (as aborted) or steer (answering with the steered
// text), "deaf ..." never, "exit ..." answers and exits, "flood ..."
// prints without end, "grandchild ..." starts a grandchild.
func fakePiWarm(string) int {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	say := func(v any) {
		b, _ := json.Marshal(v)
		os.Stdout.Write(append(b, '\n'))
	}
	usage := map[string]any{"input": 10, "output": 5, "cost": map[string]any{"total": 0}}
	answer := func(text, stop string) {
		say(map[string]any{"type": "message_update", "assistantMessageEvent": map[string]any{"type": "text_delta", "delta": text}})
		say(map[string]any{"type": "message_end", "message": map[string]any{"role": "assistant", "model": "m", "content": []any{map[string]any{"type": "text", "text": text}},
			"usage": usage, "stopReason": stop}})
		say(map[string]any{"type": "agent_end", "messages": []any{}})
	}
	turns := 0
	waiting := false
	for in.Scan() {
		var m struct{ ID, Type, Message string }
		if json.Unmarshal(in.Bytes(), &m) != nil {
			continue
		}
		switch m.Type {
		case "abort":
			say(map[string]any{"type": "response", "command": "abort", "success": true})
			if waiting {
				waiting = false
				answer("", "aborted")
			}
		case "steer":
			say(map[string]any{"type": "response", "command": "steer", "success": waiting})
			if waiting {
				waiting = false
				answer("steered: "+m.Message, "stop")
			}
		case "prompt":
			turns++
			say(map[string]any{"id": m.ID, "type": "response", "command": "prompt", "success": true})
			say(map[string]any{"type": "agent_start"})
			verb, _, _ := strings.Cut(m.Message, " ")
			switch verb {
			case "wait":
				waiting = true
				continue
			case "deaf":
				continue
			case "flood":
				line := strings.Repeat("y", 1<<10) + "\n"
				for {
					if _, err := os.Stdout.WriteString(line); err != nil {
						os.Exit(1)
					}
				}
			case "grandchild":
				gc := exec.Command("sleep", "300")
				if gc.Start() == nil {
					_ = os.WriteFile("grandchild.pid", []byte(strconv.Itoa(gc.Process.Pid)), 0o600)
				}
			}
			answer(fmt.Sprintf("You said: %s (turn %d, pid %d)", m.Message, turns, os.Getpid()), "stop")
			if verb == "exit" {
				fmt.Fprintln(os.Stderr, "fake pi: leaving between turns")
				os.Exit(4)
			}
		}
	}
	return 0
}

// fakeDroidWarm is Droid's stream-jsonrpc kept across turns: one
// initialize_session, then each add_user_message answered "You said:
// <prompt> (turn N, pid P)" and agent_turn_completed. A prompt "wait ..."
// completes only at droid.interrupt_session, "deaf ..." never, "exit ..."
// answers and exits, "flood ..." prints without end, "grandchild ..."
// starts a grandchild.
func fakeDroidWarm(string) int {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	say := func(v map[string]any) {
		v["jsonrpc"], v["factoryApiVersion"] = "2.0", "1.0.0"
		b, _ := json.Marshal(v)
		os.Stdout.Write(append(b, '\n'))
	}
	note := func(n map[string]any) {
		say(map[string]any{"type": "notification", "method": "droid.session_notification", "params": map[string]any{"sessionId": "s-warm", "notification": n}})
	}
	turns := 0
	waiting := false
	for in.Scan() {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		_ = json.Unmarshal(in.Bytes(), &m)
		var id string
		if json.Unmarshal(m.ID, &id) != nil {
			continue
		}
		switch m.Method {
		case "droid.initialize_session":
			say(map[string]any{"type": "response", "id": id, "result": map[string]any{"sessionId": "s-warm", "settings": map[string]any{"modelId": "droid-fake"}}})
		case "droid.load_session":
			turns = 10 // the loaded session's history
			say(map[string]any{"type": "response", "id": id, "result": map[string]any{"session": map[string]any{"messages": []any{}}, "settings": map[string]any{"modelId": "droid-fake"}}})
		case "droid.update_session_settings":
			say(map[string]any{"type": "response", "id": id, "result": map[string]any{}})
		case "droid.interrupt_session":
			say(map[string]any{"type": "response", "id": id, "result": map[string]any{}})
			if waiting {
				waiting = false
				note(map[string]any{"type": "agent_turn_completed", "reason": "interrupted"})
			}
		case "droid.add_user_message":
			var p struct{ Text string }
			_ = json.Unmarshal(m.Params, &p)
			turns++
			say(map[string]any{"type": "response", "id": id, "result": map[string]any{}})
			verb, _, _ := strings.Cut(p.Text, " ")
			switch verb {
			case "wait":
				waiting = true
				continue
			case "deaf":
				continue
			case "flood":
				line := strings.Repeat("y", 1<<10) + "\n"
				for {
					if _, err := os.Stdout.WriteString(line); err != nil {
						os.Exit(1)
					}
				}
			case "grandchild":
				gc := exec.Command("sleep", "300")
				if gc.Start() == nil {
					_ = os.WriteFile("grandchild.pid", []byte(strconv.Itoa(gc.Process.Pid)), 0o600)
				}
			}
			note(map[string]any{"type": "assistant_text_delta", "messageId": "m-" + strconv.Itoa(turns),
				"textDelta": fmt.Sprintf("You said: %s (turn %d, pid %d)", p.Text, turns, os.Getpid())})
			note(map[string]any{"type": "agent_turn_completed"})
			if verb == "exit" {
				fmt.Fprintln(os.Stderr, "fake droid: leaving between turns")
				os.Exit(4)
			}
		}
	}
	return 0
}
