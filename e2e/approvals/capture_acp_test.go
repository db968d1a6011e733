package approvals_test

import (
	"os"
	"testing"

	"github.com/card-dev/card/internal/testskip"
)

// TestCaptureACPApprovalExamples runs ask mode with the real Gemini CLI
// (answered allow) and Copilot CLI (answered deny) over a bare WebSocket,
// and writes to $CARD_DOCS_CAPTURE_ACP/<cli>.md every frame the client saw
// as a marked example, with the ACP messages between card and the agent
// (<cli>.in.jsonl: card to agent; <cli>.out.jsonl: agent to card), for
// docs/protocol.md. The agent runs behind a wrapper that copies its stdio.
func TestCaptureACPApprovalExamples(t *testing.T) {
	out := os.Getenv("CARD_DOCS_CAPTURE_ACP")
	if out == "" {
		testskip.Skip(t, testskip.DocsCapture, "set CARD_DOCS_CAPTURE_ACP=DIR (and CARD_E2E=1) to capture the ACP ask-mode examples")
	}
	for _, c := range []struct {
		cli      agentCLI
		decision string
	}{{gemini, "allow"}, {copilot, "deny"}} {
		t.Run(c.cli.id, func(t *testing.T) { captureAsk(t, out, c.cli, c.decision) })
	}
}
