package agent

import "github.com/card-dev/card/api"

// The definitions, one per adapter, each with its id. The argv each builder
// produces from these facts is in spawn/<binary>.go; the probes that read
// each CLI's sign-in are in detect/adapter_<binary>.go. Adding an agent is
// an id here, a definition and a place in adapters; docs/adding-an-agent.md
// lists the rest.

// Adapter ids. They mirror the CLI each adapter drives and are the keys
// clients use to invoke an agent, so they never change once shipped.
const (
	ClaudeCode = "claude-code"
	Codex      = "codex"
	Gemini     = "gemini"
	Copilot    = "copilot"
	Droid      = "droid"
	Pi         = "pi"
	OpenCode   = "opencode"
	QwenCode   = "qwen-code"
)

// adapters is the one list, in the order detection reports them.
var adapters = mustValid([]Adapter{claudeCode, codex, gemini, copilot, droid, pi, openCode, qwenCode})

var claudeCode = Adapter{
	ID:          ClaudeCode,
	DisplayName: "Claude Code",
	Binary:      "claude",
	PinEnv:      "CAR_CLAUDE_CODE_BIN",
	InstallHint: "install it with `npm install -g @anthropic-ai/claude-code`",
	Capabilities: api.Capabilities{
		ToolUse: true, MCP: true, Hooks: true, Sessions: true, Streaming: true, Images: true, Ask: true,
	},
	// Read-only runs pass an explicit tool allowlist; nothing outside the
	// agent's own process stops it from writing.
	ReadOnly: api.EnforcedByAllowlist,
	OwnedFlags: []string{"--permission-mode", "--tools", "--allowedTools", "--allowed-tools", "--disallowedTools",
		"--disallowed-tools", "--setting-sources", "--settings", "--mcp-config", "--add-dir", "--system-prompt",
		"--append-system-prompt", "--agents", "--plugin-dir", "--plugin-url"},
	Efforts: effortsAll,
}

var codex = Adapter{
	ID:          Codex,
	DisplayName: "Codex CLI",
	Binary:      "codex",
	PinEnv:      "CAR_CODEX_BIN",
	InstallHint: "install it with `npm install -g @openai/codex`",
	// Ask runs `codex app-server` and answers its requestApproval requests.
	Capabilities: api.Capabilities{
		ToolUse: true, MCP: true, Hooks: false, Sessions: true, Streaming: true, Images: true, Ask: true,
	},
	// `codex exec --sandbox read-only` runs the agent's commands inside the
	// OS sandbox (Seatbelt on macOS, Landlock/seccomp on Linux).
	ReadOnly: api.EnforcedByOSSandbox,
	OwnedFlags: []string{"--sandbox", "-s", "--add-dir", "--approve-for-me", "--dangerously-bypass-hook-trust", "--trust", "--profile", "-p",
		"--listen", "--stdio"},
	Efforts: effortsAll,
}

var gemini = Adapter{
	ID:          Gemini,
	DisplayName: "Gemini CLI",
	Binary:      "gemini",
	PinEnv:      "CAR_GEMINI_BIN",
	InstallHint: "install it with `npm install -g @google/gemini-cli`",
	// Ask runs `gemini --acp` and answers its session/request_permission.
	Capabilities: api.Capabilities{
		ToolUse: true, MCP: true, Hooks: false, Sessions: true, Streaming: true, Images: true, Ask: true,
	},
	// read_only asks for plan mode, Gemini's own read-only policy: the agent
	// enforces it, not card's tool list and not a kernel sandbox.
	ReadOnly: api.EnforcedByAgentDefault,
	OwnedFlags: []string{"--approval-mode", "-y", "--allowed-tools", "--policy", "--include-directories", "-p", "--prompt",
		"--prompt-interactive", "-i", "--acp", "--experimental-acp"},
}

var copilot = Adapter{
	ID:          Copilot,
	DisplayName: "GitHub Copilot CLI",
	Binary:      "copilot",
	PinEnv:      "CAR_COPILOT_BIN",
	InstallHint: "install it with `npm install -g @github/copilot`",
	// Ask runs `copilot --acp` and answers its session/request_permission.
	Capabilities: api.Capabilities{
		ToolUse: true, MCP: true, Hooks: true, Sessions: true, Streaming: true, Images: true, Ask: true,
	},
	// Read-only runs name the tools Copilot may use (--allow-tool) and deny
	// write and shell outright (a deny beats any allow); Copilot's own code
	// keeps that fence, nothing beneath it does.
	ReadOnly: api.EnforcedByAllowlist,
	OwnedFlags: []string{"--allow-tool", "--deny-tool", "--available-tools", "--excluded-tools",
		"--allow-all", "--allow-all-urls", "--allow-url", "--add-dir", "--trust-folder", "-C", "-p", "--prompt",
		"-i", "--interactive", "--mode", "--autopilot", "--plan", "--agent", "--additional-mcp-config",
		"--plugin-dir", "--enable-mcp-server", "--assisted-approval", "--enable-all-github-mcp-tools",
		"--add-github-mcp-toolset", "--add-github-mcp-tool", "--allow-all-mcp-server-instructions",
		"--output-format", "--fleet", "--acp", "--remote", "--connect"},
	Efforts: effortsAll,
}

var droid = Adapter{
	ID:          Droid,
	DisplayName: "Factory Droid",
	Binary:      "droid",
	PinEnv:      "CAR_DROID_BIN",
	InstallHint: "install it with `npm install -g @factory/cli` (its platform package, e.g. @factory/cli-linux-x64, must install too)",
	// Ask runs `droid exec` in stream-jsonrpc and answers its
	// droid.request_permission.
	Capabilities: api.Capabilities{
		ToolUse: true, MCP: true, Hooks: true, Sessions: true, Streaming: true, Images: false, Ask: true,
	},
	// `droid exec` without --auto is read-only by Droid's own autonomy
	// rules: card's boundary is the flags it does not pass, and Droid's code
	// is what refuses the writes.
	ReadOnly: api.EnforcedByAgentDefault,
	OwnedFlags: []string{"--only-tools", "--add-tools", "--remove-tools", "--cwd", "--settings", "-w",
		"--worktree", "--worktree-dir", "--mission", "--use-spec", "-f", "--file", "--input-format", "-o",
		"--output-format", "--append-system-prompt", "--append-system-prompt-file", "-s", "--session-id", "--fork"},
	NoImages: "droid exec takes no image in the mode card runs it (no image flag; an @path in the prompt stays text; " +
		"stream-json input keeps only the text); only --input-format stream-jsonrpc carries images, which card speaks in ask mode alone (images are one capability for every mode)",
	Efforts: effortsAll,
}

var pi = Adapter{
	ID:          Pi,
	DisplayName: "Pi",
	Binary:      "pi",
	PinEnv:      "CAR_PI_BIN",
	InstallHint: "install it with `npm install -g @mariozechner/pi-coding-agent`",
	// Ask runs `pi --mode rpc` with card's gate extension, which puts each
	// tool call outside the read-only set to card through a confirm dialog.
	Capabilities: api.Capabilities{
		ToolUse: true, MCP: false, Hooks: false, Sessions: true, Streaming: true, Images: true, Ask: true,
	},
	// Pi has no sandbox, no per-command allowlist and no approval prompts:
	// read-only is a tool list the model is handed and nothing refuses a
	// write made some other way. Clients must be told, and agents.invoke
	// makes them acknowledge it.
	ReadOnly: api.NotEnforced,
	OwnedFlags: []string{"--tools", "-t", "--no-tools", "-nt", "--no-builtin-tools", "-nbt", "--extension",
		"-e", "--skill", "--prompt-template", "--system-prompt", "--append-system-prompt", "--mode", "--session",
		"--session-dir", "--continue", "-c", "--resume", "-r", "--fork", "--export"},
	Efforts: []string{"low", "medium", "high", "xhigh"},
}

var openCode = Adapter{
	ID:          OpenCode,
	DisplayName: "OpenCode",
	Binary:      "opencode",
	PinEnv:      "CAR_OPENCODE_BIN",
	InstallHint: "install it with `npm install -g opencode-ai` (its install script must run: it puts the native binary in place)",
	// Every mode runs `opencode acp`, with a permission table that makes
	// every tool ask, and card answers by the mode (ask: the client).
	Capabilities: api.Capabilities{
		ToolUse: true, MCP: false, Hooks: false, Sessions: true, Streaming: true, Images: true, Ask: true,
	},
	// card hands OpenCode a permission table under which every tool asks
	// (and the repository's own config is not read), and refuses what
	// read_only does not cover: a fence OpenCode's own permission code
	// keeps, which is what an allowlist is.
	ReadOnly: api.EnforcedByAllowlist,
	// `opencode acp`'s own flags (1.18.33): --pure is card's, and the
	// rest would move or open the HTTP server OpenCode serves its ACP
	// layer from (--mdns listens on every interface).
	OwnedFlags: []string{"--pure", "--port", "--hostname", "--mdns", "--mdns-domain", "--cors", "--cwd"},
}

var qwenCode = Adapter{
	ID:          QwenCode,
	DisplayName: "Qwen Code",
	Binary:      "qwen",
	PinEnv:      "CAR_QWEN_CODE_BIN",
	InstallHint: "install it with `npm install -g @qwen-code/qwen-code`",
	// Every mode runs `qwen --acp` in its default approval mode (yolo for
	// bypass), and card answers what it asks by the mode.
	Capabilities: api.Capabilities{
		ToolUse: true, MCP: false, Hooks: false, Sessions: true, Streaming: true, Images: true, Ask: true,
	},
	// In its default approval mode Qwen Code asks before every edit and
	// every shell command its own classifier does not judge read-only
	// (ls, cat, git status run unasked); card refuses what it asks in
	// read_only. Which commands count as reading is Qwen Code's call.
	ReadOnly: api.EnforcedByAgentDefault,
	OwnedFlags: []string{"--approval-mode", "-y", "--allowed-tools", "--core-tools", "--exclude-tools", "--acp",
		"--experimental-acp", "-p", "--prompt", "-i", "--prompt-interactive", "--include-directories", "--add-dir",
		"-m", "--model", "--system-prompt", "--append-system-prompt", "-c", "--continue", "-r", "--resume",
		"--session-id", "--fork-session", "--channel", "--input-format", "-o", "--output-format", "--mcp-config",
		"--allowed-mcp-server-names", "-s", "--sandbox", "--worktree", "--json-fd", "--json-file", "--input-file"},
}
