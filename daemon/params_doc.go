package daemon

import "github.com/card-dev/card/api"

// paramDocs is what each param does for a client, as rpc.discover publishes
// it and the protocol docs' params tables show it. They are written for a
// client author in any language, not taken from the Go types' comments,
// which speak to the Go reader. A param without one fails the docs tests.
var paramDocs = func() map[string]map[string]string {
	detect := map[string]string{
		"include_health": "Also answer each adapter's health (sign-in and whether it can run); cached for 30 s unless refresh is set.",
		"refresh":        "Look for the CLIs again instead of answering the cached detection (and, with include_health, check health again).",
		"invoked_by":     "The adapter id of the calling host when the host is itself an agent: adapters it may not start (the loop guard) then carry spawn_block_reason.",
	}
	invoke := map[string]string{
		"id":                               "The adapter to run: one of the ids agents.detect lists.",
		"task":                             "The prompt for the agent. card hands it over on the agent's stdin, never on its command line.",
		"invoked_by":                       "The adapter id of the calling host when the host is itself an agent; the loop guard refuses a run that would start an agent already in the chain.",
		"cwd":                              "The directory the agent works in: absolute and existing. Optional only in read_only (then the daemon user's home); edit, ask and bypass need it, and some directories are refused for them.",
		"permission_mode":                  "What the agent may do: read_only (the default), edit (change files under cwd), ask (every other tool call becomes an agents.approve question) or bypass (only where the operator allows it).",
		"allowed_tools":                    "Narrow the mode's tools to these, one tool or pattern per entry; [] means no tools. Refused for an adapter that cannot narrow its tools.",
		"model":                            "The model the agent should use, in the agent's own naming.",
		"max_turns":                        "Stop the agent after this many turns; refused by the agents that have no such cap.",
		"effort":                           "How hard the model should think: low, medium, high, xhigh or max; refused by the agents that take no effort setting.",
		"system_prompt":                    "Replace the agent's system prompt with this text (or add to it with system_prompt_append). It reaches the agent in a private file, never on its command line.",
		"system_prompt_append":             "Add system_prompt to the agent's own system prompt instead of replacing it.",
		"session_id":                       "Start a new session under this UUID, to resume later. At most one of session_id and resume.",
		"resume":                           "Continue the existing session with this id.",
		"discard_session":                  "Leave no resumable session behind; refused by the agents that always save one.",
		"timeout_secs":                     "End the run after this many seconds: 1 to 3600 (another value is refused), default 300.",
		"max_api_retries":                  "How many times in a row the agent may retry a failing model call (rate limit, overload, network) before card ends the run: 0 to 10, default from card.toml (3).",
		"stream":                           "Answer at once with the run id and send the run's progress as agents.event notifications; without it the answer is the finished run.",
		"mcp_endpoint":                     "The URL of an MCP server (streamable HTTP) to hand the agent for this run; refused, naming why, by the agents whose CLI cannot take one. Empty means none.",
		"approval_timeout_secs":            "In ask mode, how long a question waits for an answer before card denies the tool call: 1 to 3600, default from card.toml (120). Refused in the other modes.",
		"acknowledge_unenforced_read_only": "Set to run read_only on an adapter whose read-only mode nothing enforces (read_only_enforcement not_enforced): you accept that read-only is then only what the model is told.",
		"acknowledge_unenforced_edit":      "Set to run edit on an adapter whose edit mode card cannot hold (edit_enforcement not_enforced, e.g. an agent declared in card.toml): you accept that the agent may write without asking, and card refuses only the writes outside the working dir it is asked about.",
		"attachments":                      "Images for the agent (PNG, JPEG, GIF or WebP): each a path on this machine, or base64 data with its MIME type, with an optional name.",
		"require_attachments":              "Refuse the request instead of running an adapter that cannot take the attachments (it would run without them).",
		"stall_secs":                       "After this many seconds with no output from the agent (a question waiting or an announced retry delay does not count) the run is reported stalled: 1 to 3600, default stall_secs from card.toml (300).",
		"stall_kill_secs":                  "After this many seconds with no output the run is ended, its process group killed, with error kind stalled: more than stall_secs, at most 3600; 0 or absent (the default, from card.toml) never ends a quiet run.",
		"max_cost_usd":                     "A cap on what the run may spend, in US dollars as the agent reports them: above 0, at most 10000. A run that passes it ends with error kind budget; refused by the adapters that neither cap nor report cost.",
		"max_tokens":                       "A cap on the input plus output tokens the agent reports: 1 to 1000000000. A run that passes it ends with error kind budget; refused by an adapter that reports no tokens.",
		"isolation":                        "\"worktree\": run the agent in a git worktree of the cwd's repository, made for this run on a branch of its own, instead of in the checkout; its changes become one commit, reviewable by the answer's card_session_id. The cwd must be in a git repository.",
		"base":                             "With isolation: the commit the worktree starts from, a branch, tag or commit of the repository (default HEAD).",
	}
	// CAR's invoke: agents.invoke's fields where the meaning is the same;
	// session_id is the host's routing id, the agent's session is
	// agent_session_id.
	external := map[string]string{}
	for k, v := range invoke {
		external[k] = v
	}
	external["stream"] = "Answer at once with the session id and run id and send the run's progress as agents.chat.event notifications; without it the answer is the finished run."
	external["session_id"] = "The host's own routing id for this conversation (printable text, at most 256 bytes); named in the answer and every event, never given to the agent. A chat-<uuid> id when omitted."
	external["agent_session_id"] = "Start a new session of the agent under this UUID, to resume later (what agents.invoke calls session_id)."
	external["resume"] = "Continue the agent's session with this id: an earlier answer's agent_session_id."
	external["timeout_secs"] = "End the run after this many seconds: default 300; a value outside 1 to 3600 is clamped into it, as CAR does."
	external["attachments"] = "Images for the agent, each a path on this machine with an advisory media type (the bytes decide); one card cannot send is skipped."
	runID := map[string]string{"run_id": "The run, as agents.invoke or runs.list named it."}
	sessionID := map[string]string{"session_id": "The session, as sessions.start or sessions.list named it (card's id, not the CLI's own)."}
	sessionStart := map[string]string{
		"warm":      "Start the agent's process now, where the adapter can keep one across turns, so the first turn does not wait for the CLI's start-up.",
		"isolation": "\"worktree\": run every turn in a git worktree of the cwd's repository, on a branch of the session's own, so the user's checkout is never written; each turn that changes something becomes a commit to review (sessions.diff) and bring in (sessions.apply). The cwd must be in a git repository.",
	}
	for k, v := range invoke {
		switch k {
		case "task", "stream", "attachments", "session_id", "resume", "discard_session", "max_turns", "isolation":
		case "id":
			sessionStart[k] = "The adapter of the conversation: one of the ids agents.detect lists."
		case "max_cost_usd":
			sessionStart[k] = "A cap on what the whole session may spend, in US dollars as the agent reports them; each turn gets what is left as its own cap, and once it is spent the next prompt is refused (budget_exceeded)."
		case "max_tokens":
			sessionStart[k] = "A cap on the input plus output tokens of the whole session; each turn gets what is left, and once it is spent the next prompt is refused (budget_exceeded)."
		case "timeout_secs":
			sessionStart[k] = "End each turn after this many seconds: 1 to 3600 (another value is refused), default 300."
		default:
			sessionStart[k] = v
		}
	}
	path := map[string]string{"path": "An absolute path on the substrate."}
	pid := "The PTY, by the pid substrate.pty_start answered."
	return map[string]map[string]string{
		"agents.detect":          detect,
		"agents.list_external":   detect,
		"agents.detect_external": detect,
		"agents.health_external": {
			"id":    "One adapter's health; without it the answer lists every installed adapter's.",
			"force": "Check again instead of answering the health cached in the last 30 s.",
		},
		"agents.invoke":          invoke,
		"agents.invoke_external": external,
		"agents.chat.cancel":     {"session_id": "The session_id of a running agents.invoke_external this connection started: its run is cancelled."},
		"session.auth": {
			"token":            "The token this connection was opened with (<home>/token when it connected); any other is refused, and a connection opened before `card token rotate` keeps answering to its own, not the new one.",
			"agent_id":         "Refused: card supervises no lifecycle agents.",
			"host_token":       "Refused: card has no host-management role; what a connection may call is its access class.",
			"memory_namespace": "Refused: card keeps no memory graph.",
		},
		"server.handshake": {
			"protocol_version": "The protocol version the client speaks; the answer echoes it back beside card's.",
			"client_version":   "The client's own build; accepted for CAR's sake, card does not act on it.",
		},
		"agents.cancel": {"run_id": "The run to end: its agent's whole process group is stopped and the run is recorded as cancelled."},
		"agents.approval_decide": {
			"run_id":     "The run whose question this answers.",
			"request_id": "The question's id, from agents.approve or the run's approval_requested event.",
			"decision":   "allow (this call), allow_always (this tool, by name, for the rest of the run) or deny.",
			"message":    "With deny, what the agent is told.",
		}, api.ApproveMethod: {
			"run_id":     "The run that asks.",
			"request_id": "The question's id within the run (apr_1, apr_2, …); answer with it, and the run's approval events name it.",
			"adapter":    "The agent that asks.",
			"tool":       "The tool call in question: the agent's own tool name, its input object, and the agent's id for the call.",
			"summary":    "One line for a person, such as \"Bash: npm test\" or \"Write /path/file\".",
			"expires_at": "When card denies the call if nobody has answered (RFC 3339, UTC).",
		}, "runs.list": {
			"limit":   "How many runs to answer, newest first: default 50, at most 500 (more is refused; page on with before).",
			"before":  "Page on: only runs older than this run id (the last one of the previous page).",
			"adapter": "Only the runs of this adapter id.",
			"status":  "Only the runs in this status: running, succeeded, failed, cancelled, timed_out, refused or interrupted.",
		},
		"runs.get":       runID,
		"runs.subscribe": {"run_id": runID["run_id"], "after_seq": "Replay only the events after this seq (0: from the start), then follow the run live."},
		"usage.summary": {
			"from":    "The first day, YYYY-MM-DD (default: to).",
			"to":      "The last day, YYYY-MM-DD (default: today).",
			"adapter": "Only this adapter's rows and the budgets that bound its runs (its own and the overall ones).",
		},
		"runs.prune": {
			"dry_run":      "Count what would be deleted; delete nothing.",
			"max_runs":     "Keep the newest this many runs, instead of max_runs in card.toml (0: no bound on the count).",
			"max_age_days": "Keep runs younger than this many days, instead of max_age_days in card.toml (0: no bound on age).",
		},
		"substrate.run_command": {
			"command":      "The shell command, run with sh -c.",
			"timeout_secs": "End the command after this many seconds; without it the substrate's default (10 minutes locally).",
		},
		"substrate.read_text": path,
		"substrate.write_text": {
			"path":        path["path"],
			"content":     "The whole new text of the file.",
			"create_only": "Write only where the path is confirmed missing; an existing or unknown path is refused.",
		},
		"substrate.read_bytes": {
			"path":   path["path"],
			"offset": "Where to start reading, in bytes (default 0).",
			"length": "How many bytes to read (default: to the end of the file).",
		},
		"substrate.write_bytes": {
			"path":        path["path"],
			"content_b64": "The whole new content of the file, base64.",
		},
		"substrate.path_state": path,
		"substrate.pty_start":  {"command": "The command to run in a new pseudo-terminal."},
		"substrate.pty_input":  {"pid": pid, "data": "The text to type into the terminal."},
		"substrate.pty_read":   {"pid": pid},
		"substrate.pty_resize": {"pid": pid, "rows": "The terminal's new height, in rows.", "cols": "The terminal's new width, in columns."},
		"substrate.pty_kill":   {"pid": pid},

		// Notifications: the fields of what the server sends.
		"agents.event": {
			"run_id":        "The run the event belongs to.",
			"seq":           "The event's place in the run: 1, 2, 3, … with no gaps; pass the last one seen to runs.subscribe as after_seq to go on after a reconnect.",
			"kind":          "What happened: session, text, thinking, tool_use, tool_result, retry, usage, warning, other, agent_error, approval_requested, approval_decided, changes, or the one terminal event, done or error (a session's stream adds prompt_queued, session_configured and rewound). Ignore kinds you do not know.",
			"session_id":    "On session: the agent's own session id, to resume later.",
			"model":         "On session: the model the agent runs.",
			"commands":      "On session: the slash commands the agent's CLI says it takes (name, and description and input_hint where it says them); absent when it lists none.",
			"text":          "On text and thinking: the text (a piece when delta is set); on warning: the notice; on other: the agent's line.",
			"delta":         "On text and thinking: this is one piece of a message being written; append the pieces in seq order.",
			"tool":          "On tool_use and the approval events: the tool call, with the agent's tool name, its id and its input.",
			"output":        "On tool_result: what the tool answered.",
			"is_error":      "On tool_result: the tool call failed.",
			"attempt":       "On retry: which attempt at the failed model call this is.",
			"max_attempts":  "On retry: how many attempts the run may make (1 for a refused key); a retry past it is not sent: card ends the run there and its `error` says why.",
			"delay_ms":      "On retry: how long the agent waits before it, when it says.",
			"quiet_ms":      "On stalled: how long the agent has printed nothing.",
			"kill_after_ms": "On stalled: after how long a silence card ends the run (absent when it never will).",
			"rate_limits":   "On rate_limit: the subscription's rate-limit windows the agent reported (window, status, used_percent, window_minutes, resets_at).",
			"usage":         "On usage: the tokens used: input, output and cached input.",
			"error":         "On retry: why the model call failed, in the agent's words; on agent_error: what the agent reported; on error: why the run did not succeed (its result's error.message, or its status in words when there is none).",
			"type":          "On other: the type the agent gave the line card does not map.",
			"raw":           "On other: the agent's line as JSON, when it was JSON.",
			"status":        "On done and error: how the run ended (succeeded, failed, cancelled, timed_out, interrupted).",
			"result":        "On done and error: the whole result, as agents.invoke answers a run without stream.",
			"approval":      "On approval_requested and approval_decided: the question's id, summary and times, or the decision, who made it and when.",
			"queued":        "On prompt_queued (a session's turn): the prompt that waits behind this turn: the turn it will be, its position, when it was queued, its size in bytes and its attachment count.",
			"configured":    "On session_configured (a session's stream): the session's settings after sessions.configure changed them: changed (the fields that changed), permission_mode, model and effort (\"\" for the CLI's default), applies_from_turn, and for a session whose turns run in a worktree isolation (\"worktree\") and worktree.",
			"changes":       "On changes (an isolated run's or turn's end, just before its terminal event): what it changed in its worktree: turn, commit (absent when nothing changed), files (path, status, added, deleted, binary), added and deleted lines, and error when card could not commit them.",
			"rewound":       "On rewound (an isolated session's stream, between turns): sessions.rewind put the worktree back to the state after turn (0: its base), at commit; dropped_turns are the turns whose changes are gone.",
		}, api.SubscriptionEndedMethod: {
			"run_id":           "The run whose events stopped coming to this connection; the run itself goes on.",
			"reason":           "Why: behind, the subscriber was too far behind the run's events.",
			"next_seq":         "The first event not sent, in the run's seq; runs.subscribe with after_seq = next_seq - 1 goes on from there.",
			"session_id":       "Set when the subscription cut off was a session's (sessions.subscribe), the run being its turn's: take up the session, not the run.",
			"session_next_seq": "With session_id: the first event not sent, in the session's seq; sessions.subscribe with after_seq = session_next_seq - 1 goes on from there.",
			"behind_bytes":     "How far behind the subscriber was, in bytes of events.",
			"limit":            "The bound it went past, in bytes.",
			"config_key":       "The card.toml key that sets that bound.",
			"message":          "The same, for a person.",
		}, "sessions.start": sessionStart,
		"sessions.prompt": {
			"session_id":  sessionID["session_id"],
			"task":        "The prompt for this turn, handed to the agent on its stdin (or its warm agent's channel).",
			"attachments": invoke["attachments"],
		},
		"sessions.steer": {
			"session_id": sessionID["session_id"],
			"task":       "The text to add to the running turn, over a warm agent whose CLI takes input during a turn.",
		},
		"sessions.configure": {
			"session_id":      sessionID["session_id"],
			"id":              "The session's new adapter, only before its first turn (after one, another CLI could not carry the conversation: -32602 naming id). Absent: unchanged.",
			"permission_mode": "The session's new mode from its next turn: read_only, edit, ask or bypass; the cwd is judged against it as at sessions.start. Absent: unchanged.",
			"model":           "The session's new model from its next turn, in the agent's own naming; \"default\" goes back to the CLI's own. Absent: unchanged.",
			"effort":          "The session's new effort from its next turn (low, medium, high, xhigh or max, as the adapter takes them); \"default\" goes back to the CLI's own. Absent: unchanged.",
			"isolation":       "Only before the first turn (after one: -32602 naming isolation): \"worktree\" makes the session's git worktree now, as sessions.start's isolation does; \"off\" removes it (which needs write, as sessions.discard does). Absent: unchanged.",
			"base":            "With isolation \"worktree\": the commit the worktree starts from (a branch, tag or commit; default HEAD). A session already in a worktree keeps its base: set isolation \"off\" first.",
		},
		"sessions.cancel": {
			"session_id":  sessionID["session_id"],
			"clear_queue": "Drop the queued prompts too (each recorded as a refused turn); without it the next one runs once the turn has ended.",
		},
		"sessions.close":   sessionID,
		"sessions.release": sessionID,
		"sessions.diff": {
			"session_id": sessionID["session_id"],
			"turn":       "One turn's changes (from 1); 0 or absent: the whole session's, from its base to its last turn.",
			"max_bytes":  "Cut the patch at this many bytes, after the last whole file that fits: 1 to 67108864, default 1048576. The file list is always whole.",
		},
		"sessions.apply": sessionID,
		"sessions.rewind": {
			"session_id": sessionID["session_id"],
			"turn":       "The turn whose state the worktree goes back to; 0: the state the session started from. Required.",
		},
		"sessions.discard": sessionID,
		"sessions.get":     sessionID,
		"sessions.list": {
			"adapter":        "Only the sessions of this adapter id.",
			"state":          "Only the sessions in this state: idle, running, waiting_approval or closed.",
			"include_closed": "List closed sessions too; they are left out by default.",
			"limit":          "How many sessions to answer, newest first: default 50, at most 500 (more is refused).",
		},
		"sessions.subscribe": {
			"session_id": sessionID["session_id"],
			"after_seq":  "Replay only the session's events after this seq (0: from the start), across turns, then follow the session live until it closes.",
		},
		"sessions.event": {
			"session_id": "The session the event belongs to.",
			"seq":        "The event's place in the session: from 1, counting across turns.",
			"turn":       "The turn (from 1) whose run the event belongs to; for a session_configured or rewound event between turns, the last turn taken (0 before the first); for the changes event of a turn a restart cut short, that turn.",
			"event":      "The turn's run event whole, as agents.event carries it (run_id, the run's own seq, kind, …); prompt_queued events carry queued, session_configured events configured, an isolated session's changes and rewound events changes and rewound.",
		},
		"agents.chat.event": {
			"session_id":          "The host's routing id, as agents.invoke_external was given it (or generated).",
			"agent_id":            "The adapter that runs.",
			"kind":                "token, tool_call, done or error.",
			"delta":               "On token: the text.",
			"tool":                "On tool_call: the tool's name.",
			"params":              "On tool_call: the tool's input.",
			"detail":              "On tool_call: the tool's name again, as CAR sends it.",
			"finish_reason":       "On done: turns, tool calls and duration in words, and how many images were skipped when some were.",
			"text":                "On done: the whole answer.",
			"dropped_attachments": "On done: how many attachments were not sent, when some were.",
			"error":               "On error: the run's status and why.",
			"run_id":              "card's run id for the session's run.",
			"seq":                 "The seq of the agents.event this one comes from.",
			"status":              "On done and error: how the run ended.",
			"result":              "On done and error: the run's whole result.",
		},
	}
}()
