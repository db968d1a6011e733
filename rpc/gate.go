package rpc

import (
	"crypto/sha256"
	"crypto/subtle"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/card-dev/card/rpc/rpcclient"
)

// Gate is every security check of the listener, in one place, applied before
// the upgrade. A browser page can open a WebSocket to any localhost port and
// DNS rebinding defeats a same-origin check, so a daemon that spawns coding
// agents must prove the caller read the token file, and must refuse requests
// addressed to a name that is not loopback or sent from a web origin the
// operator did not allow.
type Gate struct {
	// Token returns the current token. It is asked on every upgrade, so a
	// `card token rotate` takes effect without a restart.
	Token func() ([]byte, error)
	// AllowedOrigins are exact origins ("https://app.example") whose pages
	// may connect. Empty by default: every browser origin is refused.
	AllowedOrigins []string
	// AllowedHosts are host names accepted in the Host header besides the
	// loopback literals; only for an operator who listens elsewhere.
	AllowedHosts []string
	// OriginGrants are the access classes of connections from an allowed
	// origin, by origin as written in AllowedOrigins; an allowed origin not
	// in it gets DefaultOriginGrants. Native clients (no Origin) get all.
	OriginGrants map[string]Grants
	// Port, when set, must match a port named in the Host header.
	Port int
	// Hints name what a refused client must change, for the refusal texts.
	Hints GateHints
}

// GateHints name where this deployment keeps the token and the origin
// allowlist. The person reading a 401 or a 403 needs the file, command or
// setting to fix it, and only the application knows them.
type GateHints struct {
	// TokenFile is where a client reads the token ("<home>/token").
	TokenFile string
	// RotateToken is how the token is replaced ("`card token rotate`").
	RotateToken string
	// OriginsSetting is where an operator extends AllowedOrigins
	// ("allowed_origins in card.toml").
	OriginsSetting string
}

// Refusal is a reason the gate turned an upgrade away.
type Refusal struct {
	Status int
	Reason string
}

// Check decides an upgrade request. It returns the subprotocol to select
// (empty when none) or a refusal. The token is never part of a refusal text.
func (g *Gate) Check(r *http.Request) (subprotocol string, refusal *Refusal) {
	if !g.hostAllowed(r.Host) {
		return "", &Refusal{http.StatusForbidden, "forbidden: the Host header must be localhost, 127.0.0.1 or [::1] with the daemon's port (DNS-rebinding protection)"}
	}
	if origin, present := r.Header["Origin"]; present {
		if !g.originAllowed(strings.Join(origin, ",")) {
			where := ""
			if g.Hints.OriginsSetting != "" {
				where = " (" + g.Hints.OriginsSetting + ")"
			}
			return "", &Refusal{http.StatusForbidden, "forbidden: this Origin is not on the daemon's allowlist" + where + "; native clients send no Origin"}
		}
	}
	if r.URL.RawQuery != "" {
		if queryLooksLikeCredential(r.URL.Query()) {
			return "", &Refusal{http.StatusUnauthorized, "unauthorized: a token in the URL is refused (URLs end up in logs and history); send it as Authorization: Bearer <token> or the card.bearer.<token> subprotocol"}
		}
		return "", &Refusal{http.StatusBadRequest, "bad request: /rpc takes no query parameters"}
	}
	tokenFile := g.Hints.TokenFile
	if tokenFile == "" {
		tokenFile = "the token file"
	}
	given, viaSubprotocol, offeredVersion := bearer(r)
	if given == "" {
		return "", &Refusal{http.StatusUnauthorized, "unauthorized: missing token; send Authorization: Bearer <token> with the contents of " + tokenFile}
	}
	want, err := g.Token()
	if err != nil || len(want) == 0 {
		return "", &Refusal{http.StatusServiceUnavailable, "service unavailable: the daemon cannot read its token file"}
	}
	if subtle.ConstantTimeCompare([]byte(given), want) != 1 {
		msg := "unauthorized: wrong token; read it again from " + tokenFile
		if g.Hints.RotateToken != "" {
			msg += " (it changes on " + g.Hints.RotateToken + ")"
		}
		return "", &Refusal{http.StatusUnauthorized, msg}
	}
	switch {
	case offeredVersion:
		return rpcclient.SubprotocolVersion, nil
	case viaSubprotocol:
		// The client offered only the bearer subprotocol; a browser fails
		// the handshake unless one offered protocol is selected.
		return rpcclient.BearerSubprotocolPrefix + given, nil
	}
	return "", nil
}

// tokenDigest is the SHA-256 of a token: what a connection keeps of the
// one it was opened with, rather than the token itself.
type tokenDigest [sha256.Size]byte

func digestOf(token string) tokenDigest { return sha256.Sum256([]byte(token)) }

// openedWith is the digest of the token an upgrade the gate admitted
// carried.
func openedWith(r *http.Request) tokenDigest {
	tok, _, _ := bearer(r)
	return digestOf(tok)
}

func queryLooksLikeCredential(q url.Values) bool {
	for k := range q {
		switch strings.ToLower(k) {
		case "token", "access_token", "bearer", "auth", "authorization", "key", "api_key":
			return true
		}
	}
	return false
}

// bearer finds the token in the Authorization header or the subprotocols.
func bearer(r *http.Request) (token string, viaSubprotocol, offeredVersion bool) {
	for _, p := range websocketProtocols(r) {
		if p == rpcclient.SubprotocolVersion {
			offeredVersion = true
		}
	}
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, tok, ok := strings.Cut(h, " ")
		if ok && strings.EqualFold(scheme, "Bearer") {
			return strings.TrimSpace(tok), false, offeredVersion
		}
		return "", false, offeredVersion
	}
	for _, p := range websocketProtocols(r) {
		if tok, ok := strings.CutPrefix(p, rpcclient.BearerSubprotocolPrefix); ok {
			return tok, true, offeredVersion
		}
	}
	return "", false, offeredVersion
}

func websocketProtocols(r *http.Request) []string {
	var out []string
	for _, h := range r.Header.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(h, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}

func (g *Gate) hostAllowed(hostport string) bool {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		host, port = hostport, ""
		host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	}
	if port != "" && g.Port != 0 && port != strconv.Itoa(g.Port) {
		return false
	}
	switch strings.ToLower(host) {
	case "localhost", "127.0.0.1", "::1":
		return true
	}
	for _, h := range g.AllowedHosts {
		if strings.EqualFold(h, host) {
			return true
		}
	}
	return false
}

// Grants decides what an upgrade that passed Check may call, and the
// origin it came from: a request without Origin is a native client (a
// browser always sends one on a WebSocket upgrade), which holds every
// class; a page from an allowed origin holds what OriginGrants says for it,
// else DefaultOriginGrants.
func (g *Gate) Grants(r *http.Request) (Grants, string) {
	origin, present := r.Header["Origin"]
	if !present {
		return GrantAll, ""
	}
	o := strings.Join(origin, ",")
	for k, gr := range g.OriginGrants {
		if sameOrigin(k, o) {
			return gr, o
		}
	}
	return DefaultOriginGrants, o
}

func sameOrigin(configured, sent string) bool {
	return strings.EqualFold(strings.TrimSuffix(configured, "/"), sent)
}

// originAllowed compares exactly. "null" (sandboxed frames, file: pages) is
// never allowed: it names no one.
func (g *Gate) originAllowed(origin string) bool {
	if origin == "" || origin == "null" {
		return false
	}
	for _, o := range g.AllowedOrigins {
		if sameOrigin(o, origin) {
			return true
		}
	}
	return false
}
