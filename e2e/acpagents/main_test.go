// Package acpagents drives the ACP-speaking agent CLIs that card has no
// adapter for yet — OpenCode (`opencode acp`) and Qwen Code (`qwen --acp`),
// the real ones from npm — against the loopback OpenAI stand-in, speaking
// ACP to them directly as card's generic ACP adapter will: initialize,
// session/new, session/prompt, session/resume and session/load, cancel,
// and the answers to their permission questions and file requests.
//
// Each test pins one fact the adapter is to be built on (what each agent
// offers, where it asks and where it acts on its own, what a cancel or a
// kill of its process group leaves behind), so a new release that changes
// one fails here first. The facts and how they were found are in
// docs/e2e-notes.md; the traces CARD_ACPAGENTS_CAPTURE writes are in
// e2e/fixtures/cli/.
//
// Like every real-CLI test these run only with CARD_E2E=1 (or
// CARD_E2E_REQUIRED=1, which turns a missing CLI into a failure); see
// standin.CLI.
package acpagents

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/card-dev/card/internal/testskip"
)

// The agents run as child processes read by goroutines, and the stand-ins
// are HTTP servers; none may outlive the suite.
func TestMain(m *testing.M) { goleak.VerifyTestMain(testskip.Wrap(m)) }
