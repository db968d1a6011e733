package copilotdroidpi

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/e2e/standin"
)

// A 500 KB prompt (a pasted log, a long file; 300 KB for Copilot) reaches each CLI on stdin
// and its answer comes back whole, however much of the prompt the CLI
// prints back in its own stream before it exits.
func TestCopilotPiAndDroidAnswerAFiveHundredKilobytePrompt(t *testing.T) {
	const answer = "PONG to a big prompt from the anthropic stand-in"
	c, project := moreAgents(t, standin.Script{Answer: answer}, false)
	prompt := func(n int) string {
		var b strings.Builder
		for b.Len() < n {
			b.WriteString("this line is context the agent is given and need not answer; it only makes the prompt big.\n")
		}
		b.WriteString("Say pong.\n")
		return b.String()
	}
	// Copilot refuses, by itself, a prompt past its model's context
	// window (128k tokens for a model it has no figures for); 300 KB is
	// under it and still past what a socket or pipe holds.
	size := map[string]int{agent.Copilot: 300 << 10, agent.Pi: 500 << 10, agent.Droid: 500 << 10}
	for _, id := range []string{agent.Copilot, agent.Pi, agent.Droid} {
		t.Run(id, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			p := params(id, project)
			p.Task = prompt(size[id])
			res, err := c.Invoke(ctx, p)
			require.NoError(t, err)
			require.False(t, res.IsError, "%+v", res.Error)
			assert.Equal(t, answer, strings.TrimSpace(res.Answer))
		})
	}
}
