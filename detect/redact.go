package detect

import (
	"regexp"
	"strings"
)

// secretKeyWords: a details key containing one of these names a credential.
// "apiKeySource" (which says where a key came from, e.g. the variable name)
// is kept: only keys that end in "key" are treated as the key itself.
var secretKeyWords = []string{"token", "secret", "password", "passwd", "credential", "cookie", "authorization", "session_id", "sessionid"}

// opaqueValue matches long unbroken strings with the shape of keys, tokens
// and JWTs. Status output is meant for people; a 32-character run with no
// spaces is a credential far more often than it is prose.
var opaqueValue = regexp.MustCompile(`^[A-Za-z0-9_\-./+=:]{32,}$`)

var secretPrefixes = []string{"sk-", "sk_", "ghp_", "gho_", "github_pat_", "xoxb-", "AIza", "ya29.", "eyJ"}

// Redact returns a copy of details without anything secret-shaped: keys that
// name credentials and values that look like one. Health details travel to
// every connected client and into logs, and vendors add fields to their
// status output between releases, so this strips by shape rather than by a
// list of known fields.
func Redact(details map[string]any) map[string]any {
	if details == nil {
		return nil
	}
	out := make(map[string]any, len(details))
	for k, v := range details {
		if secretKey(k) {
			continue
		}
		if v, keep := redactValue(v); keep {
			out[k] = v
		}
	}
	return out
}

func redactValue(v any) (any, bool) {
	switch x := v.(type) {
	case string:
		return x, !secretString(x)
	case map[string]any:
		return Redact(x), true
	case []any:
		out := make([]any, 0, len(x))
		for _, e := range x {
			if e, keep := redactValue(e); keep {
				out = append(out, e)
			}
		}
		return out, true
	default:
		return v, true
	}
}

func secretKey(k string) bool {
	l := strings.ToLower(k)
	if strings.HasSuffix(l, "key") || strings.HasSuffix(l, "_key") {
		return true
	}
	for _, w := range secretKeyWords {
		if strings.Contains(l, w) {
			return true
		}
	}
	return false
}

func secretString(s string) bool {
	t := strings.TrimSpace(s)
	for _, p := range secretPrefixes {
		if strings.HasPrefix(t, p) && len(t) >= 12 {
			return true
		}
	}
	return opaqueValue.MatchString(t)
}
