package main

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const fixture = "# The card protocol\n\nIntro, see [Errors](#errors) and [the client](examples/client.js).\n\n" +
	"## Transport\n\nOne frame per message.\n\n### Strict params\n\n```sh\n# not a heading\n```\n\n" +
	"## Agents methods\n\n### Sign-in states\n\nGeneral words.\n\n**Claude Code** signs in so.\n\n| state | status |\n| --- | --- |\n| none | `not_configured` |\n\n" +
	"**Codex CLI** signs in otherwise.\n\n**Not an adapter.** Stays.\n\n" +
	"## Permission modes\n\n### The mapping\n\n- **Claude `edit`:** flags.\n  more flags.\n- **General** stays.\n- **Pi:** its flags.\n\n" +
	"#### Codex (app-server)\n\nCodex asks so; see [Transport](#transport).\n\n" +
	"## Errors\n\n| code | name |\n\n## Something new\n\nNobody mapped this.\n"

func TestTheSplitKeepsEveryLineOnExactlyOnePage(t *testing.T) {
	res, err := Split(fixture)
	require.NoError(t, err)
	require.NoError(t, Verify(fixture, res.Pages))
	page := func(p string) string { return Render(res.Pages[p]) }

	assert.Contains(t, page("protocol/other.md"), "Nobody mapped this.", "an unknown section goes to the other page")
	assert.Contains(t, strings.Join(res.Warnings, "\n"), `"Something new"`, "and is warned about")
	assert.Contains(t, page("protocol.md"), "[Errors](protocol/errors.md#errors)", "the index links the page that holds the heading")
	assert.Contains(t, page("protocol.md"), "[the client](examples/client.js)")
	assert.Contains(t, page("protocol/transport.md"), "## Strict params\n", "a heading keeps its place under the page's title")
	assert.Contains(t, page("protocol/transport.md"), "# not a heading\n", "a code block's lines are not headings")

	claude := page("agents/claude-code.md")
	assert.Contains(t, claude, "## Sign-in\n\n**Claude Code** signs in so.\n\n| state | status |")
	assert.Contains(t, claude, "## Flags\n\n- **Claude `edit`:** flags.\n  more flags.\n")
	assert.NotContains(t, claude, "General")
	assert.Contains(t, page("agents/codex.md"), "## Codex (app-server)\n", "a subsection about one adapter moves whole")
	assert.Contains(t, page("agents/codex.md"), "[Transport](../protocol/transport.md#transport)")
	assert.Contains(t, page("agents/pi.md"), "- **Pi:** its flags.")

	signIn := page("protocol/sign-in.md")
	assert.Contains(t, signIn, "General words.")
	assert.Contains(t, signIn, "**Not an adapter.** Stays.")
	assert.NotContains(t, signIn, "signs in so")
	assert.Contains(t, signIn, "[Claude Code](../agents/claude-code.md#sign-in), [Codex CLI](../agents/codex.md#sign-in)")
	perm := page("protocol/permissions.md")
	assert.Contains(t, perm, "- **General** stays.")
	assert.Contains(t, perm, "[Claude Code](../agents/claude-code.md#flags).\n\n- **General** stays.", "each run of moved items leaves its pointer")
	assert.Contains(t, perm, "[Pi](../agents/pi.md#flags).")
	assert.Contains(t, perm, "[Codex (app-server)](../agents/codex.md#codex-app-server) is on the Codex CLI page.")
}

func TestVerifyRefusesALostADoubledOrAnAlteredLine(t *testing.T) {
	res, err := Split(fixture)
	require.NoError(t, err)
	ls := res.Pages["protocol/transport.md"]
	i := -1
	for j, l := range ls {
		if l.Text == "One frame per message." {
			i = j
		}
	}
	require.GreaterOrEqual(t, i, 0)
	for name, pages := range map[string][]line{
		"lost":    append(append([]line{}, ls[:i]...), ls[i+1:]...),
		"doubled": append(append([]line{}, ls...), ls[i]),
		"altered": append(append(append([]line{}, ls[:i]...), line{ls[i].Src, "One frame per mesage."}), ls[i+1:]...),
	} {
		changed := map[string][]line{}
		for p, l := range res.Pages {
			changed[p] = l
		}
		changed["protocol/transport.md"] = pages
		assert.Error(t, Verify(fixture, changed), name)
	}
}

func TestSplittingTheIndexAgainIsRefused(t *testing.T) {
	res, err := Split(fixture)
	require.NoError(t, err)
	_, err = Split(Render(res.Pages["protocol.md"]))
	assert.ErrorContains(t, err, "already the split's index")
}

// When docs/protocol.md is the one-file document again (a branch that
// edited it merged), the split of it must be whole before anyone runs it.
func TestTheCheckedInProtocolDocSplitsWhole(t *testing.T) {
	b, err := os.ReadFile("../../protocol.md")
	require.NoError(t, err)
	if isOurs(b[:min(len(b), 400)]) || strings.Contains(string(b), Marker) {
		t.Skip("docs/protocol.md is already the split's index")
	}
	res, err := Split(string(b))
	require.NoError(t, err)
	require.NoError(t, Verify(string(b), res.Pages))
	for _, w := range res.Warnings {
		t.Log(w)
	}
}

func TestARuleWhoseHeadingIsGoneIsWarnedAbout(t *testing.T) {
	res, err := Split(strings.Replace(fixture, "### Sign-in states", "### Signing in", 1))
	require.NoError(t, err)
	assert.Contains(t, strings.Join(res.Warnings, "\n"), `no section is headed "Sign-in states"`)
}
