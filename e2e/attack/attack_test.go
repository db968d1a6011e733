// Package attack holds the real-browser attack test: a page from another
// local origin, loaded in headless Chromium, tries every way a web page could
// reach the daemon's WebSocket, and each attempt must fail and be logged.
//
// A browser page can open a WebSocket to any localhost port, and DNS
// rebinding defeats a same-origin check; a daemon that spawns coding agents is
// remote code execution if a page gets through. Unit tests of the gate prove
// the rules over synthetic requests; this proves them against what a real
// browser actually sends (its Origin, its Host, its subprotocol header).
package attack

import (
	"context"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/internal/testskip"
	"github.com/card-dev/card/rpc"
)

func TestMain(m *testing.M) { daemontest.VerifyTestMain(m) }

// attempt is one way the page tries to open the daemon's socket.
type attempt struct {
	Name        string   `json:"name"`
	URL         string   `json:"url"`
	Protocols   []string `json:"protocols"`
	ExpectOpen  bool     `json:"expect_open"`
	WantStatus  int      `json:"-"`
	WantLogHost string   `json:"-"`
}

// outcome is what the page saw for one attempt.
type outcome struct {
	Name     string `json:"name"`
	Opened   bool   `json:"opened"`
	Errored  bool   `json:"errored"`
	Closed   bool   `json:"closed"`
	Code     int    `json:"code"`
	Answer   string `json:"answer"`
	TimedOut bool   `json:"timed_out"`
}

// The page runs the attempts one after another, records each outcome in the
// DOM and the title, and posts the verdict back to the server that served it
// (same origin, so no CORS question), which is how the test reads it.
var pageTmpl = template.Must(template.New("page").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>running</title></head>
<body><pre id="results"></pre>
{{if .Frame}}<iframe src="{{.Frame}}"></iframe>{{end}}
<script>
const attempts = {{.Attempts}};
function tryOne(a) {
  return new Promise((resolve) => {
    const r = {name: a.name, opened: false, errored: false, closed: false, code: 0, answer: "", timed_out: false};
    let ws;
    const timer = setTimeout(() => { r.timed_out = true; try { ws.close(); } catch (e) {} resolve(r); }, 5000);
    try {
      ws = a.protocols && a.protocols.length ? new WebSocket(a.url, a.protocols) : new WebSocket(a.url);
    } catch (e) {
      r.errored = true; r.answer = "constructor: " + e; clearTimeout(timer); resolve(r); return;
    }
    ws.onopen = () => {
      r.opened = true;
      ws.send(JSON.stringify({jsonrpc: "2.0", id: 1, method: "daemon.info"}));
    };
    ws.onmessage = (ev) => { r.answer = String(ev.data); ws.close(1000); };
    ws.onerror = () => { r.errored = true; };
    ws.onclose = (ev) => { r.closed = true; r.code = ev.code; clearTimeout(timer); resolve(r); };
  });
}
(async () => {
  const out = [];
  for (const a of attempts) {
    const r = await tryOne(a);
    out.push(r);
    document.getElementById("results").textContent = JSON.stringify(out, null, 1);
  }
  document.title = "DONE";
  await fetch("/verdict", {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(out)});
})();
</script></body></html>`))

// page is a local web origin serving the attack page and collecting its verdict.
type page struct {
	srv *httptest.Server
	// verdict is the body the page posted to /verdict.
	verdict chan []byte
}

func newPage(t *testing.T) *page {
	p := &page{verdict: make(chan []byte, 1)}
	p.srv = httptest.NewUnstartedServer(nil)
	t.Cleanup(p.srv.Close)
	return p
}

func (p *page) origin() string { return "http://" + p.srv.Listener.Addr().String() }

// start serves the page; frame, when set, is another page embedded in it,
// so one browser tab runs both origins' attempts at once.
func (p *page) start(t *testing.T, attempts []attempt, frame string) {
	p.render(t, pageTmpl, struct {
		Attempts []attempt
		Frame    string
	}{attempts, frame})
}

// render serves tmpl executed with data at / and the verdict handler.
func (p *page) render(t *testing.T, tmpl *template.Template, data any) {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if err := tmpl.Execute(w, data); err != nil {
			t.Errorf("render the page %s: %v", tmpl.Name(), err)
		}
	})
	p.serve(t, mux)
}

// serve adds the /verdict handler to mux and starts the page's server.
func (p *page) serve(t *testing.T, mux *http.ServeMux) {
	mux.HandleFunc("/verdict", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			t.Errorf("the page's verdict could not be read: %v", err)
			return
		}
		select {
		case p.verdict <- body:
		default:
		}
	})
	p.srv.Config.Handler = mux
	p.srv.Start()
}

// findChromium locates Debian's chromium. Without it the test cannot run;
// that is a loud skip locally and a failure in CI (CARD_E2E_REQUIRED=1),
// so the proof never silently goes missing.
func findChromium(t *testing.T) string {
	for _, name := range []string{os.Getenv("CARD_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"} {
		if name == "" {
			continue
		}
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	testskip.Skip(t, testskip.Gap{
		Why:     "no Chromium for the browser attack",
		Enable:  "apt-get install -y chromium, or set CARD_CHROMIUM to a Chromium binary",
		Install: true,
	}, "!!! BROWSER ATTACK TEST DID NOT RUN: no chromium on PATH. The listener's browser defences are UNPROVEN in this run.")
	return ""
}

// runChromium loads url headless and waits for the verdict of every page
// (the top one and those it embeds). Chromium
// runs in its own process group, killed whole (SIGTERM, then SIGKILL) when
// the verdict arrives or the deadline passes, so no renderer is left behind.
func runChromium(t *testing.T, bin, url string, pages ...*page) [][]byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	profile := t.TempDir()
	cmd := exec.Command(bin,
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
		"--no-first-run", "--disable-quic", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--user-data-dir="+profile,
		"--host-resolver-rules=MAP rebind.test 127.0.0.1",
		"--remote-debugging-port=0", // keeps the new headless mode running until killed
		url)
	cmd.Dir = profile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stderr strings.Builder
	cmd.Stdout = io.Discard
	cmd.Stderr = &limitedWriter{w: &stderr, n: 64 << 10}
	require.NoError(t, cmd.Start(), "start %s", bin)
	// exited is closed (not sent on) so both the wait below and the
	// deferred kill can observe it.
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	defer func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(3 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		// Renderers may outlive the browser process briefly; the group
		// kill reaches them too.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}()
	started := time.Now()
	verdicts := make([][]byte, len(pages))
	for i, p := range pages {
		select {
		case v := <-p.verdict:
			t.Logf("the page of %s reported after %s", p.origin(), time.Since(started).Round(time.Millisecond))
			verdicts[i] = v
		case <-exited:
			t.Fatalf("chromium exited before the page of %s reported (%v); stderr:\n%s", p.origin(), waitErr, stderr.String())
		case <-ctx.Done():
			t.Fatalf("no verdict from the page of %s within 60s; stderr:\n%s", p.origin(), stderr.String())
		}
	}
	return verdicts
}

type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(b []byte) (int, error) {
	if l.n <= 0 {
		return len(b), nil
	}
	k := min(len(b), l.n)
	l.n -= k
	_, err := l.w.Write(b[:k])
	return len(b), err
}

// refusals are the daemon's "refused websocket upgrade" log lines for
// requests from one page's origin, in order.
func refusals(logs *observer.ObservedLogs, origin string) []map[string]any {
	var out []map[string]any
	for _, e := range logs.FilterMessage("refused websocket upgrade").All() {
		if m := e.ContextMap(); m["origin"] == origin {
			out = append(out, m)
		}
	}
	return out
}

func TestABrowserPageCannotReachTheDaemonByAnyRoute(t *testing.T) {
	bin := findChromium(t)

	attacker := newPage(t)
	allowed := newPage(t)

	// The operator allowed exactly one web origin: the positive control's.
	core, logs := observer.New(zapcore.DebugLevel)
	d := daemontest.Start(t, daemontest.Options{
		Config:   fmt.Sprintf("allowed_origins = [%q]\n", allowed.origin()),
		Logger:   zap.New(core),
		NoClient: true,
	})
	token := d.Token

	wsURL := d.URL // ws://127.0.0.1:PORT/rpc
	_, port, err := net.SplitHostPort(strings.TrimSuffix(strings.TrimPrefix(wsURL, "ws://"), "/rpc"))
	require.NoError(t, err)
	rebindHost := "rebind.test:" + port
	rebindURL := "ws://" + rebindHost + "/rpc"
	guessed := strings.Repeat("0", len(token))
	bearer := "card.bearer."

	// From an origin the operator never allowed. The attacker is even handed
	// the real token (as if it leaked): the Origin rule alone must stop it.
	attackerAttempts := []attempt{
		{Name: "no token", URL: wsURL, WantStatus: 403},
		{Name: "guessed token as subprotocol", URL: wsURL, Protocols: []string{bearer + guessed}, WantStatus: 403},
		{Name: "guessed token with card.v1", URL: wsURL, Protocols: []string{"card.v1", bearer + guessed}, WantStatus: 403},
		{Name: "leaked token as subprotocol", URL: wsURL, Protocols: []string{bearer + token}, WantStatus: 403},
		{Name: "leaked token in the query", URL: wsURL + "?token=" + token, WantStatus: 403},
		{Name: "DNS rebinding with the leaked token", URL: rebindURL, Protocols: []string{bearer + token}, WantStatus: 403, WantLogHost: rebindHost},
	}
	// From the allowed origin: the token is still required, never accepted
	// in the URL, and the Host rule still holds; then the positive control
	// proves the harness can see a connection succeed.
	allowedAttempts := []attempt{
		{Name: "allowed origin, no token", URL: wsURL, WantStatus: 401},
		{Name: "allowed origin, guessed token", URL: wsURL, Protocols: []string{bearer + guessed}, WantStatus: 401},
		{Name: "allowed origin, correct token in the query", URL: wsURL + "?token=" + token, WantStatus: 401},
		{Name: "allowed origin, DNS rebinding with the correct token", URL: rebindURL, Protocols: []string{bearer + token}, WantStatus: 403, WantLogHost: rebindHost},
		{Name: "allowed origin, correct token as subprotocol (positive control)", URL: wsURL, Protocols: []string{"card.v1", bearer + token}, ExpectOpen: true},
	}
	allowed.start(t, allowedAttempts, "")
	attacker.start(t, attackerAttempts, allowed.origin()+"/")

	check := func(origin string, attempts []attempt, got []outcome) {
		t.Helper()
		require.Len(t, got, len(attempts), "the page from %s reported a different number of attempts", origin)
		var wantRefusals []attempt
		for i, a := range attempts {
			o := got[i]
			require.Equal(t, a.Name, o.Name)
			assert.False(t, o.TimedOut, "%s: the attempt neither opened nor failed within 5s", a.Name)
			if a.ExpectOpen {
				assert.True(t, o.Opened, "%s: the positive control did not connect (%+v)", a.Name, o)
				assert.Contains(t, o.Answer, `"protocol_version"`, "%s: daemon.info was not answered", a.Name)
				continue
			}
			assert.False(t, o.Opened, "%s: THE BROWSER PAGE CONNECTED (%+v)", a.Name, o)
			assert.True(t, o.Errored || o.Closed, "%s: no error or close seen", a.Name)
			wantRefusals = append(wantRefusals, a)
		}
		// Every refused attempt must have reached the daemon and been
		// logged with its status: a page that never ran, or a browser
		// that blocked the request itself, cannot pass for the daemon.
		logged := refusals(logs, origin)
		require.Len(t, logged, len(wantRefusals), "refusal log lines for the page from %s: %v", origin, logged)
		for i, a := range wantRefusals {
			e := logged[i]
			assert.EqualValues(t, a.WantStatus, e["status"], "%s: logged %v", a.Name, e)
			if a.WantLogHost != "" {
				assert.Equal(t, a.WantLogHost, e["host"], "%s: the rebinding name did not reach the daemon as Host", a.Name)
			}
			for k, v := range e {
				assert.NotContains(t, fmt.Sprint(v), token, "the refusal log field %q holds the token", k)
			}
		}
	}

	// The allowed page runs in an iframe of the attacker's, so one browser
	// launch covers both origins; their refusals are told apart by the
	// Origin the daemon logged.
	raw := runChromium(t, bin, attacker.origin()+"/", attacker, allowed)
	verdicts := make([][]outcome, len(raw))
	for i, b := range raw {
		require.NoError(t, json.Unmarshal(b, &verdicts[i]), "the page posted an unreadable verdict %q", b)
	}
	t.Logf("attacker page verdict: %+v", verdicts[0])
	t.Logf("allowed page verdict: %+v", verdicts[1])
	check(attacker.origin(), attackerAttempts, verdicts[0])
	check(allowed.origin(), allowedAttempts, verdicts[1])

	if t.Failed() {
		var all []string
		for _, e := range logs.All() {
			all = append(all, fmt.Sprintf("%s %v", e.Message, e.ContextMap()))
		}
		t.Logf("daemon log:\n%s", strings.Join(all, "\n"))
	}
}

// The flood page asks the daemon for upgrades it will refuse, as fast as
// the browser lets it, for a few seconds: WebSockets in a few lanes (a
// browser slows these down itself after failures) and plain no-cors
// fetches of /rpc in many more (it does not slow those). It reports how many
// of each it made, how many fetches failed at the network level, and how
// many sockets opened.
var floodTmpl = template.Must(template.New("flood").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>flooding</title></head><body><script>
const url = {{.URL}};
const httpURL = url.replace(/^ws:/, "http:");
const end = Date.now() + {{.Millis}};
const v = {sockets: 0, opened: 0, fetches: 0, fetch_errors: 0};
function socketLane() {
  return new Promise((resolve) => {
    const next = () => {
      if (Date.now() >= end) { resolve(); return; }
      v.sockets++;
      let ws;
      try { ws = new WebSocket(url); } catch (e) { setTimeout(next, 0); return; }
      ws.onopen = () => { v.opened++; ws.close(); };
      ws.onclose = () => next();
    };
    next();
  });
}
async function fetchLane() {
  while (Date.now() < end) {
    v.fetches++;
    try { await fetch(httpURL, {mode: "no-cors", cache: "no-store"}); } catch (e) { v.fetch_errors++; }
  }
}
(async () => {
  const lanes = [];
  for (let i = 0; i < {{.SocketLanes}}; i++) lanes.push(socketLane());
  for (let i = 0; i < {{.FetchLanes}}; i++) lanes.push(fetchLane());
  await Promise.all(lanes);
  document.title = "DONE";
  await fetch("/verdict", {method: "POST", body: JSON.stringify(v)});
})();
</script></body></html>`))

// logSize counts the lines and bytes a logger writes, as a file would hold
// them (JSON, one record per line).
type logSize struct {
	mu           sync.Mutex
	lines, bytes int
}

func (l *logSize) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines += strings.Count(string(b), "\n")
	l.bytes += len(b)
	return len(b), nil
}

func (l *logSize) Sync() error { return nil }

func (l *logSize) get() (int, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lines, l.bytes
}

// A page that floods the daemon with upgrades it knows will be refused must
// not be able to fill the disk: the log keeps a few lines and a count, and
// the count adds up to every attempt the page made.
func TestABrowserFloodOfRefusedUpgradesLeavesABoundedLog(t *testing.T) {
	bin := findChromium(t)
	core, logs := observer.New(zapcore.DebugLevel)
	size := &logSize{}
	enc := zap.NewProductionEncoderConfig()
	file := zapcore.NewCore(zapcore.NewJSONEncoder(enc), size, zapcore.InfoLevel)
	d := daemontest.Start(t, daemontest.Options{Logger: zap.New(zapcore.NewTee(core, file)), NoClient: true})

	flood := newPage(t)
	flood.render(t, floodTmpl, struct {
		URL                             string
		Millis, SocketLanes, FetchLanes int
	}{d.URL, 4000, 4, 16})
	_, before := size.get()

	raw := runChromium(t, bin, flood.origin()+"/", flood)
	var v struct {
		Sockets, Opened, Fetches int
		FetchErrors              int `json:"fetch_errors"`
	}
	require.NoError(t, json.Unmarshal(raw[0], &v), "%q", raw[0])
	t.Logf("in 4 s the page tried %d WebSockets (%d opened) and %d fetches (%d failed in the browser)", v.Sockets, v.Opened, v.Fetches, v.FetchErrors)
	assert.Zero(t, v.Opened, "THE FLOOD PAGE CONNECTED")
	require.Greater(t, v.Sockets+v.Fetches, 10*rpc.DefaultRefusalLogBurst, "the page did not flood; the test proves nothing")

	// Shutting down writes the count of what the window held back.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	require.NoError(t, d.Shutdown(ctx))
	lines, bytes := size.get()
	logged := logs.FilterMessage("refused websocket upgrade").Len()
	suppressed := 0
	reasons := map[string]bool{}
	for _, e := range logs.FilterMessage("refused websocket upgrade").All() {
		reasons[e.ContextMap()["reason"].(string)] = true
	}
	for _, e := range logs.FilterMessage("refused websocket upgrades not logged one by one").All() {
		n, _ := e.ContextMap()["suppressed"].(int64)
		suppressed += int(n)
	}
	t.Logf("daemon log: %d refusal lines (%d reasons), %d refusals counted in summaries; %d lines, %d bytes in all (%d before the flood)",
		logged, len(reasons), suppressed, lines, bytes, before)
	assert.LessOrEqual(t, logged, len(reasons)*rpc.DefaultRefusalLogBurst, "at most the burst per reason")
	assert.Equal(t, v.Sockets+v.Fetches-v.FetchErrors, logged+suppressed, "every request reached the daemon and was either logged or counted")
	assert.Less(t, bytes-before, 16<<10, "the flood's share of the log")
}
