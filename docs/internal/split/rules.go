package main

import (
	"slices"
	"sort"
	"strings"

	"github.com/card-dev/card/agent"
)

// The mapping: which section of the one-file protocol document goes to which
// page. A section is matched by its heading text (without the #s); a
// section takes its parent's page unless a rule names it. A section no rule
// reaches lands on otherPage with a warning, never dropped.

// page is one output file, relative to the docs directory.
type page struct {
	Path  string
	Title string
	About string // one line under the title, what a reader finds here
}

const (
	indexPage = "protocol.md"
	otherPage = "protocol/other.md"
)

var pages = []page{
	{"protocol/transport.md", "Transport and authentication", "The socket, its framing, the token, and how a client finds the daemon."},
	{"protocol/access.md", "Access classes", "What each method needs the connection to be allowed, and how params raise it."},
	{"protocol/methods.md", "Methods: daemon", "How methods are listed, and the daemon's own methods (`daemon.info`, `rpc.discover`)."},
	{"protocol/agents.md", "Methods: agents", "Finding the agents, their health, CAR's external-agent methods, cancelling and approving."},
	{"protocol/sign-in.md", "Sign-in states", "What `ready` means and how health reads sign-in; each adapter's states are on its page under docs/agents/."},
	{"protocol/invoke.md", "`agents.invoke`", "Running an agent: params, results, streaming, ask mode, the environment a run gets."},
	{"protocol/api-failures.md", "API failures", "How card bounds an agent's retries of a failing model API, and what a client sees."},
	{"protocol/attachments.md", "Attachments", "Images handed to an agent with a task: types, limits, refusals, what each adapter does."},
	{"protocol/runs.md", "Methods: runs", "The run history: list, get, subscribe, prune; statuses and crash safety."},
	{"protocol/usage.md", "Methods: usage", "What the agents have spent, per adapter and day, and the budgets card.toml sets on them."},
	{"protocol/substrate.md", "Methods: substrate", "Commands, files and terminals on the host, for clients allowed `host`."},
	{"protocol/events.md", "Events and server requests", "`agents.event` notifications, the end of a subscription, and `agents.approve`."},
	{"protocol/live.md", "What live means per agent", "How soon text reaches a client for each agent CLI, with real examples."},
	{"protocol/errors.md", "Errors", "The JSON-RPC codes and card's application codes, with the `data` each carries."},
	{"protocol/permissions.md", "Permission modes", "The guard, the four modes, how each adapter enforces them, and ask mode."},
	{"agents/README.md", "Agents", "The adapter ids, where card looks for each CLI, and one page per agent."},
	{"protocol/car.md", "CAR's methods", "The methods and events card serves in CAR's dialect (`session.auth`, `server.handshake`, `agents.invoke_external`, `agents.chat.cancel`, `agents.chat.event`), and what a CAR client gets from card."},
	{"protocol/versioning.md", "Versioning", "The protocol version and what a bump means."},
	{"config.md", "Configuration: `card.toml`", "The keys of `card.toml`, the daemon's optional configuration, with their defaults."},
	{otherPage, "Other sections", "Sections the split does not know yet; move each to its page in docs/internal/split/rules.go."},
}

// sectionRules: heading text → page path.
var sectionRules = map[string]string{
	"Transport":                         "protocol/transport.md",
	"Authentication":                    "protocol/transport.md",
	"Finding the daemon":                "protocol/transport.md",
	"Access classes":                    "protocol/access.md",
	"Methods":                           "protocol/methods.md",
	"Daemon methods":                    "protocol/methods.md",
	"Agents methods":                    "protocol/agents.md",
	"Sign-in states":                    "protocol/sign-in.md",
	"`agents.invoke`":                   "protocol/invoke.md",
	"API failures: how fast a run ends": "protocol/api-failures.md",
	"Attachments: images for the agent": "protocol/attachments.md",
	"`agents.invoke_external`":          "protocol/car.md",
	"`agents.chat.cancel`":              "protocol/car.md",
	"`session.auth`":                    "protocol/car.md",
	"`server.handshake`":                "protocol/car.md",
	"`agents.chat.event`":               "protocol/car.md",
	"Runs methods":                      "protocol/runs.md",
	"Substrate methods":                 "protocol/substrate.md",
	"Usage methods":                     "protocol/usage.md",
	"Notifications":                     "protocol/events.md",
	"What live means per agent":         "protocol/live.md",
	"`runs.subscription_ended`":         "protocol/events.md",
	"Server requests":                   "protocol/events.md",
	"Errors":                            "protocol/errors.md",
	"The guard, for plugin authors":     "protocol/permissions.md",
	"Permission modes":                  "protocol/permissions.md",
	"Agent ids":                         "agents/README.md",
	"CAR compatibility":                 "protocol/car.md",
	"Versioning":                        "protocol/versioning.md",
	"Configuration":                     "config.md",

	// Whole subsections about one adapter go to its page.
	"Gemini CLI and Copilot CLI (ACP)": "agents/gemini.md",
	"Codex (app-server)":               "agents/codex.md",
	"Droid (stream-jsonrpc)":           "agents/droid.md",
	"Pi (RPC mode)":                    "agents/pi.md",
	"Gemini and workspace trust":       "agents/gemini.md",
}

// adapter is one agent page, made from the agent package's facts so that
// a new adapter gets its page without a line here. Names are how the prose
// opens a paragraph or a list item about it: the display name, and each of
// its words but "CLI" (`**Claude Code**`, `- **Claude `read_only` …`,
// `- **Copilot:**`).
type adapter struct {
	ID    string
	Title string
	Names []string
	// SeeAlso: sections on another agent's page whose heading names this
	// one too ("Gemini CLI and Copilot CLI (ACP)").
	SeeAlso []string
}

var adapters = func() []adapter {
	var out []adapter
	for _, a := range agent.All() {
		names := []string{a.DisplayName}
		if n := strings.TrimSuffix(a.DisplayName, " CLI"); n != a.DisplayName {
			names = append(names, n)
		}
		for _, w := range strings.Fields(a.DisplayName) {
			if w != "CLI" && !slices.Contains(names, w) {
				names = append(names, w)
			}
		}
		ad := adapter{ID: a.ID, Title: a.DisplayName, Names: names}
		for h, p := range sectionRules {
			if p == agentPage(a.ID) || !strings.HasPrefix(p, "agents/") {
				continue
			}
			for _, n := range names[1:] {
				if strings.Contains(h, n+" ") {
					ad.SeeAlso = append(ad.SeeAlso, h)
					break
				}
			}
		}
		sort.Strings(ad.SeeAlso)
		out = append(out, ad)
	}
	return out
}()

// blockRules: in a section with this heading, a paragraph that opens with
// `**<adapter name>` (and what follows it up to the next heading or bold
// paragraph) or a list item that opens with `- **<adapter name>` moves to
// that adapter's page, under the given heading.
var blockRules = map[string]string{
	"Sign-in states":                        "Sign-in",
	"The mapping":                           "Flags",
	"`ask`: a tool call becomes a question": "Ask mode",
}

// glance: sections whose tables compare every adapter; they stay in the
// client contract, and each agent page links its row there.
// Named: the table has rows only for the adapters its heading names.
var glance = []struct {
	Heading, What string
	Named         bool
}{
	{"Agent ids", "id, binary, package, pin", false},
	{"How `read_only` is enforced", "how read-only is enforced", false},
	{"The mapping", "the argv of each permission mode", false},
	{"Request fields per adapter", "which request fields it honours", false},
	{"What live means per agent", "live grain", false},
	{"API failures: how fast a run ends", "retries and API failures", false},
	{"Attachments: images for the agent", "images", false},
	{"Health of Copilot, Droid and Pi", "health, decided from files", true},
}
