package daemon

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/daemon/runs"
)

func TestBudgetKeysAreCheckedStrictlyAndTyposGetADidYouMean(t *testing.T) {
	cases := []struct {
		name, text string
		want       []string
	}{
		{"a typo of an overall key", "[budget]\ndayly_usd = 5\n", []string{"budget.dayly_usd", `did you mean "daily_usd"`}},
		{"a typo of an adapter key", "[budget.adapters.codex]\nmonthy_usd = 5\n", []string{"budget.adapters.codex.monthy_usd", `did you mean "monthly_usd"`}},
		{"a typo of the adapters table", "[budget.adaptors.codex]\ndaily_usd = 5\n", []string{`did you mean "adapters"`}},
		{"a typo of an adapter id", "[budget.adapters.codx]\ndaily_usd = 5\n", []string{"[budget.adapters.codx]", `did you mean "codex"`}},
		{"zero is refused", "[budget]\ndaily_usd = 0\n", []string{"[budget] daily_usd", "above zero"}},
		{"negative is refused", "[budget.adapters.gemini]\ndaily_tokens = -1\n", []string{"[budget.adapters.gemini] daily_tokens", "above zero"}},
		{"NaN is refused", "[budget]\nmonthly_usd = nan\n", []string{"[budget] monthly_usd", "not a number"}},
		{"infinity is refused", "[budget]\nmonthly_usd = inf\n", []string{"[budget] monthly_usd", "not a number"}},
		{"an absurd figure is refused", "[budget]\ndaily_usd = 1e9\n", []string{"[budget] daily_usd", "maximum"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseConfig("card.toml", c.text)
			require.Error(t, err)
			for _, w := range c.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestBudgetsReachTheRunSubsystemAsConfigured(t *testing.T) {
	cfg, err := ParseConfig("card.toml", "[budget]\ndaily_usd = 5\nmonthly_usd = 50.5\n[budget.adapters.claude-code]\ndaily_tokens = 200000\n")
	require.NoError(t, err)
	b := cfg.budgets()
	assert.Equal(t, runs.Limits{DailyUSD: 5, MonthlyUSD: 50.5}, b.All)
	assert.Equal(t, map[string]runs.Limits{"claude-code": {DailyTokens: 200000}}, b.Adapters)
	def := DefaultConfig().budgets()
	assert.Equal(t, runs.Limits{}, def.All, "no budget unless card.toml sets one")
}
