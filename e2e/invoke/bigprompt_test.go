package invoke_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/e2e/standin"
)

// bigPrompt is a task of about n bytes: a question after lines of filler,
// the size of a pasted log or a long file.
func bigPrompt(n int) string {
	var b strings.Builder
	line := "this line is context the agent is given and need not answer; it only makes the prompt big.\n"
	for b.Len() < n {
		b.WriteString(line)
	}
	b.WriteString("Say pong.\n")
	return b.String()
}

// A CLI that prints the prompt back in its own stream (Gemini's user
// message event) and exits as soon as it has answered must still have its
// whole stream read: the answer is the last line it writes.
func TestAFiveHundredKilobytePromptIsAnswered(t *testing.T) {
	for _, tc := range cases() {
		t.Run(tc.adapter, func(t *testing.T) {
			bin := standin.CLI(t, tc.bin)
			t.Parallel()
			answer := "PONG to a big prompt from the " + tc.adapter + " stand-in"
			sess := startDaemon(t, tc.newServer(t, bin, standin.Script{Answer: answer}, false))
			evs := sess.run(t, tc.adapter, bigPrompt(500<<10))
			last := evs[len(evs)-1]
			require.NotNil(t, last.Result)
			require.Equal(t, api.EventDone, last.Kind, "status %s, error %+v", last.Status, last.Result.Error)
			assert.Equal(t, answer, strings.TrimSpace(last.Result.Answer))
		})
	}
}
