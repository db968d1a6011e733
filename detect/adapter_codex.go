package detect

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
)

func itoa(n int) string { return strconv.Itoa(n) }

func codexHome(in AuthInput) string {
	if h := in.Getenv("CODEX_HOME"); h != "" {
		return h
	}
	return filepath.Join(in.Home, ".codex")
}

// codexFacts is what the Codex decision looks at besides the status line:
// names and presence, never a credential value.
type codexFacts struct {
	// Home is $CODEX_HOME or ~/.codex, as shown in reasons.
	Home string
	// Env: which of CODEX_API_KEY and OPENAI_API_KEY the runs' env sets.
	Env map[string]bool
	// Provider is the model_provider the adapter's card.toml args select,
	// "" when they select none (Codex's own OpenAI sign-in then applies).
	Provider string
}

func readCodexFacts(in AuthInput) codexFacts {
	return codexFacts{
		Home:     displayPath(in.Home, codexHome(in)),
		Env:      envSet(in.Getenv, "CODEX_API_KEY", "OPENAI_API_KEY"),
		Provider: codexProvider(in.Args),
	}
}

// codexProvider finds `-c model_provider="<name>"` (or --config, or the
// --config=… form) in the operator's args. A run with a custom provider
// signs in with that provider's env_key, not with Codex's login.
func codexProvider(args []string) string {
	var provider string
	for i, a := range args {
		kv := ""
		switch {
		case (a == "-c" || a == "--config") && i+1 < len(args):
			kv = args[i+1]
		case strings.HasPrefix(a, "--config="):
			kv = strings.TrimPrefix(a, "--config=")
		case strings.HasPrefix(a, "-c") && len(a) > 2 && a[2] != '-':
			kv = a[2:]
		}
		k, v, ok := strings.Cut(kv, "=")
		if ok && strings.TrimSpace(k) == "model_provider" {
			provider = strings.Trim(strings.TrimSpace(v), `"'`)
		}
	}
	if provider == "openai" {
		return ""
	}
	return provider
}

// codexAuthKind guesses in the order `codex exec` signs in: a custom
// provider in card.toml, CODEX_API_KEY, then $CODEX_HOME/auth.json, whose
// auth_mode (a mode name, not a secret) or token/key field presence says
// which login it holds.
func codexAuthKind(in AuthInput) api.AuthKind {
	f := readCodexFacts(in)
	if f.Provider != "" || f.Env["CODEX_API_KEY"] {
		return api.AuthAPIKey
	}
	keys, exists, err := readJSONShape(filepath.Join(codexHome(in), "auth.json"))
	if err != nil {
		return api.AuthKindUnknown
	}
	if !exists {
		return api.AuthUnauthenticated
	}
	switch strings.ToLower(rawString(keys, "auth_mode")) {
	case "chatgpt":
		return api.AuthSubscription
	case "apikey", "api_key":
		return api.AuthAPIKey
	}
	switch {
	case rawPresent(keys, "tokens"):
		return api.AuthSubscription
	case rawPresent(keys, "OPENAI_API_KEY"):
		return api.AuthAPIKey
	}
	return api.AuthKindUnknown
}

const codexLoginHint = "run `codex login` to sign in with ChatGPT, or `printenv OPENAI_API_KEY | codex login --with-api-key` to store an API key, as the daemon's user; or set CODEX_API_KEY in the daemon's environment (or card.toml [adapters.codex] env)"

// codexHealth runs `codex login status`, which prints one line on stderr and
// exits 1 when logged out.
func codexHealth(ctx context.Context, in HealthInput) HealthVerdict {
	f := readCodexFacts(AuthInput{Home: in.Home, Getenv: in.Getenv, Args: in.Args})
	if f.Provider != "" {
		// Codex's own login plays no part; the status command would only
		// confuse the answer.
		return HealthVerdict{Status: api.StatusReady,
			Details: withAuth(map[string]any{}, MethodAPIKey, "the model provider "+f.Provider+" in card.toml [adapters.codex] args"),
			Reason:  "runs use the model provider " + f.Provider + " chosen in card.toml [adapters.codex] args, which signs in with its own env_key; card did not check that key"}
	}
	out := in.Run(ctx, "login", "status")
	if v, done := commonHealthFailure("codex login status", out); done {
		return v
	}
	return codexVerdict(out, f)
}

// codexVerdict is the pure decision over the status line and the facts.
// Codex prints warnings (for example about a HOME under /tmp) on the same
// stream, so the status line is found by content, not position.
//
// What 0.171.0 prints (seen): "Not logged in" (exit 1); "Logged in using
// ChatGPT"; "API key configured - sk-…***…" after `codex login
// --with-api-key` (earlier releases: "Logged in using an API key - …");
// "Error checking login status: …" (exit 1) for an auth.json it cannot
// parse. `codex exec` also signs in with CODEX_API_KEY from its environment,
// before the stored login, although the status command does not say so;
// OPENAI_API_KEY in the environment is read by neither.
func codexVerdict(out ProbeOutput, f codexFacts) HealthVerdict {
	var line string
	for _, l := range strings.Split(out.Stderr+"\n"+out.Stdout, "\n") {
		l = strings.TrimSpace(l)
		low := strings.ToLower(l)
		if strings.Contains(low, "logged in") || strings.Contains(low, "expired") || strings.Contains(low, "api key configured") || strings.HasPrefix(low, "error checking login status") {
			line = l
			break
		}
	}
	// "API key configured - sk-…***…": the part after the dash is a masked
	// key; it is not kept.
	summary, _, _ := strings.Cut(line, " - ")
	details := map[string]any{}
	if summary != "" {
		details["status_line"] = summary
	}
	stored := "the API key stored in " + f.Home + "/auth.json by `codex login --with-api-key`"
	low := strings.ToLower(line)
	switch {
	case f.Env["CODEX_API_KEY"] && !strings.Contains(low, "error"):
		return HealthVerdict{Status: api.StatusReady, Details: withAuth(details, MethodAPIKey, "CODEX_API_KEY"),
			Reason: "`codex exec` signs in with CODEX_API_KEY from the daemon's environment; card did not ask OpenAI whether it is valid"}
	case strings.HasPrefix(low, "not logged in"):
		if f.Env["OPENAI_API_KEY"] {
			return HealthVerdict{Status: api.StatusNotConfigured, Details: details,
				Reason: "OPENAI_API_KEY is set in the daemon's environment but Codex CLI does not sign in with it; store it with `printenv OPENAI_API_KEY | codex login --with-api-key` as the daemon's user, or set CODEX_API_KEY instead"}
		}
		return HealthVerdict{Status: api.StatusNotConfigured, Reason: "Codex CLI is not signed in: " + codexLoginHint, Details: details}
	case strings.HasPrefix(low, "error checking login status"):
		return HealthVerdict{Status: api.StatusUnknown, Details: details,
			Reason: "Codex CLI cannot read its saved login in " + f.Home + "/auth.json (" + firstLine(line) + "): " + codexLoginHint}
	case strings.Contains(low, "expired"):
		return HealthVerdict{Status: api.StatusExpired, Reason: "Codex CLI's login has expired: " + codexLoginHint, Details: details}
	case out.ExitCode != 0:
	case strings.HasPrefix(low, "logged in using chatgpt"):
		return HealthVerdict{Status: api.StatusReady, Details: withAuth(details, MethodSubscription, "the ChatGPT login in "+f.Home+"/auth.json")}
	case strings.HasPrefix(low, "api key configured"), strings.HasPrefix(low, "logged in using an api key"):
		return HealthVerdict{Status: api.StatusReady, Details: withAuth(details, MethodAPIKey, stored)}
	case strings.HasPrefix(low, "logged in"):
		return HealthVerdict{Status: api.StatusReady, Details: details}
	}
	return HealthVerdict{Status: api.StatusUnknown, Reason: "`codex login status` gave an answer card does not recognise (exit " + itoa(out.ExitCode) + "): " + firstLine(out.Stderr, out.Stdout), Details: details}
}

// codexPackage: bin/codex.js is a Node launcher that runs the native binary
// of the @openai/codex-<platform>-<arch> package (an npm alias whose own
// version reads "0.171.0-linux-x64"), or of its own vendor directory; the
// launcher's version is the one `codex --version` prints.
var codexPackage = &npmPackage{Name: "@openai/codex", Platform: func(goos, goarch string) []platformBinary {
	triple := map[string]string{
		"linux/amd64":  "x86_64-unknown-linux-musl",
		"linux/arm64":  "aarch64-unknown-linux-musl",
		"darwin/amd64": "x86_64-apple-darwin",
		"darwin/arm64": "aarch64-apple-darwin",
	}[goos+"/"+goarch]
	if triple == "" {
		return nil
	}
	bin := "vendor/" + triple + "/bin/codex"
	return []platformBinary{
		{Package: "@openai/codex-" + nodePlatform[goos] + "-" + nodeArch[goarch], Binary: bin},
		{Binary: bin},
	}
}}

// codexProbe is how detection reads Codex's sign-in, health and version.
var codexProbe = Probe{For: agent.Codex, AuthKind: codexAuthKind, Health: codexHealth, Package: codexPackage}
