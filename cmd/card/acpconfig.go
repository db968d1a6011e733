package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/card-dev/card/agent"
)

// editors are the editors `card acp --print-config` writes an entry for,
// each in the shape its documented custom-agent setting takes.
var editors = map[string]func(entries []acpEntry) string{
	"zed":       zedConfig,
	"jetbrains": jetbrainsConfig,
	"neovim":    neovimConfig,
	"emacs":     emacsConfig,
}

func editorNames() string {
	names := make([]string, 0, len(editors))
	for n := range editors {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// npmPackage is the npm package of the card binary, which npx runs.
const npmPackage = "@card-dev/card"

// acpEntry is one agent in an editor's settings: what it shows and the
// command it runs.
type acpEntry struct {
	ID, Title string
	Command   string
	Args      []string
}

// acpEntries is one entry per adapter, running command with the arguments
// that make `card acp` that adapter (and the flags given to this one, so the
// entry runs what was asked for).
func acpEntries(adapters []string, command string, prefix, flags []string) []acpEntry {
	var out []acpEntry
	for _, id := range adapters {
		facts, _ := agent.Lookup(id)
		args := append(append(append([]string{}, prefix...), "acp", id), flags...)
		out = append(out, acpEntry{ID: id, Title: "card: " + facts.DisplayName, Command: command, Args: args})
	}
	return out
}

// thisBinary is the absolute path of the running card with its links
// resolved: an editor started from a desktop menu often has none of the
// shell's PATH, so the entry must not depend on it. note says when that
// path is one to think twice about.
func thisBinary() (path, note string, err error) {
	exe, err := os.Executable()
	if err != nil {
		return "", "", fmt.Errorf("where this card is: %w", err)
	}
	if resolved, err := filepath.EvalSymlinks(exe); err == nil {
		exe = resolved
	}
	slash := filepath.ToSlash(exe)
	switch {
	case strings.Contains(slash, "/node_modules/"+npmPackage+"-"):
		note = "this card runs from npm's " + npmPackage + " package, at a path npm may move when it updates or clears its cache: --npx prints an entry that runs it through npx instead"
	case strings.Contains(slash, "/go-build"):
		note = "this card was built by `go run` into a temporary directory that goes away: install it (go install ./cmd/card) and run its --print-config, or use --npx"
	}
	return exe, note, nil
}

// jsonString is s as a JSON string, with <, > and & as they are (a path
// is for a person to read).
func jsonString(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return strings.TrimSuffix(b.String(), "\n")
}

func jsonStrings(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = jsonString(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// agentServers is an "agent_servers" object, one entry a line in the
// adapters' order, each entry's fields from fields.
func agentServers(entries []acpEntry, fields func(acpEntry) string) string {
	var b strings.Builder
	b.WriteString("{\n  \"agent_servers\": {\n")
	for i, e := range entries {
		sep := ","
		if i == len(entries)-1 {
			sep = ""
		}
		fmt.Fprintf(&b, "    %s: { %s }%s\n", jsonString(e.Title), fields(e), sep)
	}
	b.WriteString("  }\n}\n")
	return b.String()
}

// zedConfig is the agent_servers object of Zed's settings.json.
func zedConfig(entries []acpEntry) string {
	return agentServers(entries, func(e acpEntry) string {
		return fmt.Sprintf(`"type": "custom", "command": %s, "args": %s`, jsonString(e.Command), jsonStrings(e.Args))
	})
}

// jetbrainsConfig is ~/.jetbrains/acp.json.
func jetbrainsConfig(entries []acpEntry) string {
	return agentServers(entries, func(e acpEntry) string {
		return fmt.Sprintf(`"command": %s, "args": %s, "env": {}`, jsonString(e.Command), jsonStrings(e.Args))
	})
}

// neovimConfig is CodeCompanion's setup with one ACP adapter per entry,
// each built on its claude_code adapter with card's command.
func neovimConfig(entries []acpEntry) string {
	var b strings.Builder
	b.WriteString("require(\"codecompanion\").setup({\n  adapters = {\n    acp = {\n")
	for _, e := range entries {
		name := "card_" + strings.ReplaceAll(e.ID, "-", "_")
		words := []string{luaString(e.Command)}
		for _, a := range e.Args {
			words = append(words, luaString(a))
		}
		fmt.Fprintf(&b, "      %s = function()\n", name)
		fmt.Fprintf(&b, "        return require(\"codecompanion.adapters\").extend(\"claude_code\", {\n")
		fmt.Fprintf(&b, "          name = %s,\n", luaString(name))
		fmt.Fprintf(&b, "          commands = { default = { %s } },\n", strings.Join(words, ", "))
		b.WriteString("        })\n      end,\n")
	}
	b.WriteString("    },\n  },\n")
	if len(entries) > 0 {
		fmt.Fprintf(&b, "  interactions = { chat = { adapter = %s } },\n", luaString("card_"+strings.ReplaceAll(entries[0].ID, "-", "_")))
	}
	b.WriteString("})\n")
	return b.String()
}

// emacsConfig is one agent-shell config per entry.
func emacsConfig(entries []acpEntry) string {
	var b strings.Builder
	for i, e := range entries {
		if i > 0 {
			b.WriteString("\n")
		}
		facts, _ := agent.Lookup(e.ID)
		params := make([]string, len(e.Args))
		for i, a := range e.Args {
			params[i] = elispString(a)
		}
		prompt := elispString(facts.DisplayName + "> ")
		fmt.Fprintf(&b, "(add-to-list 'agent-shell-agent-configs\n")
		fmt.Fprintf(&b, "             (agent-shell-make-agent-config\n")
		fmt.Fprintf(&b, "              :identifier 'card-%s\n", e.ID)
		fmt.Fprintf(&b, "              :mode-line-name %s\n", elispString(e.Title))
		fmt.Fprintf(&b, "              :buffer-name %s\n", elispString(e.Title))
		fmt.Fprintf(&b, "              :shell-prompt %s\n", prompt)
		fmt.Fprintf(&b, "              :shell-prompt-regexp %s\n", elispString(regexpQuoteElisp(facts.DisplayName+"> ")))
		fmt.Fprintf(&b, "              :client-maker (lambda (buffer)\n")
		fmt.Fprintf(&b, "                              (acp-make-client :command %s\n", elispString(e.Command))
		fmt.Fprintf(&b, "                                               :command-params '(%s)\n", strings.Join(params, " "))
		fmt.Fprintf(&b, "                                               :context-buffer buffer))))\n")
	}
	return b.String()
}

// luaString is s as a Lua string literal: the bytes as they are but for
// the few a double-quoted literal cannot hold (Lua 5.1, which LuaJIT and so
// Neovim speak, has no \u escape; UTF-8 passes through).
func luaString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\', '"':
			b.WriteByte('\\')
			b.WriteByte(c)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case 0:
			b.WriteString(`\0`)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// elispString is s as an Emacs Lisp string literal: backslash and double
// quote escaped, everything else as it is.
func elispString(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// regexpQuoteElisp escapes what an Emacs regexp reads specially, as
// regexp-quote does.
func regexpQuoteElisp(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`[*.\?+^$`, r) {
			b.WriteRune('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
