package detect

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"

	"github.com/card-dev/card/api"
)

// AuthMethod is how an adapter that reads ready signs in, in one vocabulary
// for every adapter. Health puts it in details.auth_method, beside
// details.auth_source (the variable, file or login it came from), so a
// client can say "uses your Claude subscription" or "bills the API key in
// ANTHROPIC_API_KEY" without knowing each CLI's own words.
type AuthMethod string

const (
	// MethodSubscription: a login to the vendor's own product (a Claude,
	// ChatGPT, Google, GitHub Copilot or Factory account), or a token
	// minted from one.
	MethodSubscription AuthMethod = "subscription"
	// MethodAPIKey: an API key or bearer token, billed per request.
	MethodAPIKey AuthMethod = "api_key"
	// MethodCloud: a cloud provider's account (Amazon Bedrock, Google
	// Vertex AI, Microsoft Foundry), billed through that cloud.
	MethodCloud AuthMethod = "cloud"
)

// Kind is the deprecated auth_kind that matches the method: a cloud
// account is billed per request like a key.
func (m AuthMethod) Kind() api.AuthKind {
	switch m {
	case MethodSubscription:
		return api.AuthSubscription
	case MethodAPIKey, MethodCloud:
		return api.AuthAPIKey
	}
	return api.AuthKindUnknown
}

// withAuth records how the adapter signs in. details may be nil.
func withAuth(details map[string]any, m AuthMethod, source string) map[string]any {
	if details == nil {
		details = map[string]any{}
	}
	details["auth_method"] = string(m)
	if source != "" {
		details["auth_source"] = source
	}
	return details
}

// MethodOf reads back the auth method a health answer recorded, "" when
// it recorded none.
func MethodOf(h api.ExternalAgentHealth) AuthMethod {
	s, _ := h.Details["auth_method"].(string)
	return AuthMethod(s)
}

// envSet reports which of names are set to something other than blanks.
func envSet(getenv func(string) string, names ...string) map[string]bool {
	out := map[string]bool{}
	for _, n := range names {
		if strings.TrimSpace(getenv(n)) != "" {
			out[n] = true
		}
	}
	return out
}

// envTruthy reads a switch the way the Node CLIs do ("1", "true", "yes",
// "on", any case).
func envTruthy(getenv func(string) string, name string) bool {
	switch strings.ToLower(strings.TrimSpace(getenv(name))) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}

// regularFile reports whether path is an existing regular file that is
// not empty. Only existence is looked at, never the content.
func regularFile(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Size() > 0
}

// dotenvNames lists the variable names a .env file sets, never their
// values. A line is NAME=value, optionally after "export ".
func dotenvNames(path string) map[string]bool {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	names := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		line = strings.TrimPrefix(line, "export ")
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := strings.Cut(line, "=")
		name = strings.TrimSpace(name)
		value = strings.Trim(strings.TrimSpace(value), `"'`)
		if ok && name != "" && value != "" && !strings.ContainsAny(name, " \t") {
			names[name] = true
		}
	}
	return names
}

// displayPath shows path with the home directory as "~", for reasons.
func displayPath(home, path string) string {
	if home != "" {
		if rel, err := filepath.Rel(home, path); err == nil && !strings.HasPrefix(rel, "..") {
			return filepath.Join("~", rel)
		}
	}
	return path
}

// namesIn returns the members of set in the order of names.
func namesIn(set map[string]bool, names []string) []string {
	var out []string
	for _, n := range names {
		if set[n] {
			out = append(out, n)
		}
	}
	return out
}

func anyOf(set map[string]bool, names ...string) string {
	for _, n := range names {
		if set[n] {
			return n
		}
	}
	return ""
}

// toAny turns a list of names into a JSON array for details (never null).
func toAny(names []string) []any {
	out := make([]any, 0, len(names))
	for _, n := range names {
		out = append(out, n)
	}
	return out
}
