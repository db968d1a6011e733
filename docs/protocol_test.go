// Package docs holds the checks that keep the protocol docs true (the index
// docs/protocol.md, the client contract's pages under docs/protocol/ and
// the agents' pages under docs/agents/, read as one document): every
// registered method and notification has a heading, every JSON example
// parses and decodes strictly into the Go types the daemon registers, and
// the error table is the daemon registry's code table. Run with CARD_DOCS_CAPTURE=FILE to
// capture fresh examples from a live daemon.
package docs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/internal/testskip"
	"github.com/card-dev/card/rpc"
	"github.com/card-dev/card/rpc/rpcclient"
)

// protocolPages are the files that make up the protocol document, the
// index first: a method's heading or example may be on any of them.
func protocolPages(t *testing.T) []string {
	t.Helper()
	files := []string{"protocol.md"}
	for _, dir := range []string{"protocol", "agents"} {
		m, err := filepath.Glob(filepath.Join(dir, "*.md"))
		require.NoError(t, err)
		files = append(files, m...)
	}
	require.Greater(t, len(files), 1, "the protocol's pages are missing")
	return files
}

// protocolText is every page's text, one after another.
func protocolText(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, f := range protocolPages(t) {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		b.Write(data)
		b.WriteByte('\n')
	}
	return b.String()
}

// startDaemon starts a daemon in home whose only agent is the fake Claude
// Code of testdata, with the login-shell PATH off so no CLI installed on
// this machine leaks into the examples. The fake answers `claude auth
// status` as the real one does with ANTHROPIC_API_KEY set, and the
// environment has that (fake) key, as health checks the status command's
// answer against what the runs' environment holds.
func startDaemon(t *testing.T, home string, agents ...string) *daemontest.Daemon {
	t.Helper()
	fake, err := filepath.Abs(filepath.Join("testdata", "fake-claude.sh"))
	require.NoError(t, err)
	pins := map[string]string{agent.ClaudeCode: fake}
	for i := 0; i+1 < len(agents); i += 2 {
		pins[agents[i]] = agents[i+1]
	}
	return daemontest.Start(t, daemontest.Options{
		Home:     home,
		Config:   "login_shell_path = false\n",
		Agents:   pins,
		Environ:  []string{"HOME=" + home, "ANTHROPIC_API_KEY=sk-ant-docs-example-not-a-key"},
		Logger:   zap.NewNop(),
		NoClient: true,
	})
}

// example is one marked ```json block of the doc.
type example struct {
	File   string
	Line   int
	Method string
	Kind   string // request, response or notification
	JSON   string
}

type parsedDoc struct {
	Headings []string
	JSON     []example // every ```json block; Method is empty when unmarked
}

var markerRE = regexp.MustCompile(`^<!-- example: (\S+) (request|response|notification) -->$`)

// parseDoc reads headings and ```json blocks, pairing each block with the
// marker comment on the last non-blank line before its fence.
func parseDoc(text string) (parsedDoc, error) {
	var d parsedDoc
	lines := strings.Split(text, "\n")
	lastText := ""
	for i := 0; i < len(lines); i++ {
		l := strings.TrimRight(lines[i], " \t\r")
		switch {
		case strings.HasPrefix(l, "```"):
			lang := strings.TrimSpace(strings.TrimPrefix(l, "```"))
			start := i + 1
			j := start
			for j < len(lines) && !strings.HasPrefix(strings.TrimSpace(lines[j]), "```") {
				j++
			}
			if j == len(lines) {
				return d, fmt.Errorf("line %d: code block never closed", i+1)
			}
			if lang == "json" {
				ex := example{Line: i + 1, JSON: strings.Join(lines[start:j], "\n")}
				if m := markerRE.FindStringSubmatch(lastText); m != nil {
					ex.Method, ex.Kind = m[1], m[2]
				}
				d.JSON = append(d.JSON, ex)
			}
			i = j
			lastText = ""
		case strings.HasPrefix(l, "#"):
			d.Headings = append(d.Headings, l)
			lastText = l
		case strings.TrimSpace(l) != "":
			lastText = strings.TrimSpace(l)
		}
	}
	return d, nil
}

// decodeStrict decodes raw into a new value of t, refusing unknown fields
// and trailing data, the way the registry decodes params.
func decodeStrict(raw json.RawMessage, t reflect.Type) error {
	v := reflect.New(t)
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v.Interface()); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the value")
	}
	return nil
}

type wireRequest struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params,omitempty"`
}

type wireResponse struct {
	JSONRPC string           `json:"jsonrpc"`
	ID      json.RawMessage  `json:"id"`
	Result  json.RawMessage  `json:"result,omitempty"`
	Error   *rpcclient.Error `json:"error,omitempty"`
}

// checkExample decodes one marked example into the registered types. It is
// the part of the doc test that fails when a field is renamed or removed.
func checkExample(ex example, reg *rpc.Registry) error {
	methods, notes := byName(reg)
	if _, ok := methods[ex.Method]; !ok {
		if q, ok := serverRequests(reg)[ex.Method]; ok {
			return checkServerRequestExample(ex, q)
		}
	}
	raw := json.RawMessage(ex.JSON)
	switch ex.Kind {
	case "request", "notification":
		var req wireRequest
		if err := decodeStrict(raw, reflect.TypeFor[wireRequest]()); err != nil {
			return fmt.Errorf("not a JSON-RPC %s: %w", ex.Kind, err)
		}
		_ = json.Unmarshal(raw, &req)
		if req.JSONRPC != "2.0" || req.Method != ex.Method {
			return fmt.Errorf("jsonrpc %q method %q, want 2.0 and %q", req.JSONRPC, req.Method, ex.Method)
		}
		var pt reflect.Type
		if ex.Kind == "request" {
			m, ok := methods[ex.Method]
			if !ok {
				return fmt.Errorf("method %s is not registered", ex.Method)
			}
			if req.ID == nil {
				return errors.New("a request example needs an id")
			}
			pt = m.Params
		} else {
			n, ok := notes[ex.Method]
			if !ok {
				return fmt.Errorf("notification %s is not registered", ex.Method)
			}
			if req.ID != nil {
				return errors.New("a notification has no id")
			}
			pt = n.Params
		}
		if len(req.Params) == 0 {
			return nil
		}
		if err := decodeStrict(req.Params, pt); err != nil {
			return fmt.Errorf("params do not fit %v: %w", pt, err)
		}
	case "response":
		m, ok := methods[ex.Method]
		if !ok {
			return fmt.Errorf("method %s is not registered", ex.Method)
		}
		var resp wireResponse
		if err := decodeStrict(raw, reflect.TypeFor[wireResponse]()); err != nil {
			return fmt.Errorf("not a JSON-RPC response: %w", err)
		}
		_ = json.Unmarshal(raw, &resp)
		if resp.JSONRPC != "2.0" || (resp.Result == nil) == (resp.Error == nil) {
			return errors.New("a response has jsonrpc 2.0 and exactly one of result and error")
		}
		if resp.Error != nil {
			return checkErrorExample(ex.Method, m, resp.Error, reg.Codes(), reg.CommonErrorCodes())
		}
		types := rpc.Alternatives(m.Result)
		var errs []error
		for _, t := range types {
			err := decodeStrict(resp.Result, t)
			if err == nil {
				return nil
			}
			errs = append(errs, fmt.Errorf("%v: %w", t, err))
		}
		return fmt.Errorf("result fits no registered type: %w", errors.Join(errs...))
	}
	return nil
}

// checkErrorExample requires the code to be in the table and be one the
// method may answer with.
func checkErrorExample(method string, m rpc.MethodInfo, e *rpcclient.Error, table []rpc.CodeInfo, common []int64) error {
	known := false
	for _, c := range table {
		known = known || c.Code == e.Code
	}
	if !known {
		return fmt.Errorf("error code %d is not in the registry's code table", e.Code)
	}
	allowed := []int64{rpcclient.CodeParseError, rpcclient.CodeInvalidRequest, rpcclient.CodeMethodNotFound, rpcclient.CodeInvalidParams, rpcclient.CodeInternalError, rpcclient.CodeTooManyRequests, rpcclient.CodeShuttingDown}
	for _, c := range append(append(allowed, common...), m.Doc.Errors...) {
		if c == e.Code {
			return nil
		}
	}
	return fmt.Errorf("%s's Doc.Errors does not list code %d", method, e.Code)
}

func loadDoc(t *testing.T) parsedDoc {
	t.Helper()
	var all parsedDoc
	for _, f := range protocolPages(t) {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		d, err := parseDoc(string(b))
		require.NoError(t, err, "docs/%s", f)
		for i := range d.JSON {
			d.JSON[i].File = "docs/" + f
		}
		all.Headings = append(all.Headings, d.Headings...)
		all.JSON = append(all.JSON, d.JSON...)
	}
	return all
}

func registry(t *testing.T) *rpc.Registry {
	t.Helper()
	return startDaemon(t, t.TempDir()).Registry()
}

func serverRequests(reg *rpc.Registry) map[string]rpc.ServerRequestInfo {
	out := map[string]rpc.ServerRequestInfo{}
	for _, q := range reg.ServerRequests() {
		out[q.Name] = q
	}
	return out
}

// checkServerRequestExample checks a request the server sends (its id is
// the server's, a string) and the client's answer to it, whose result must
// fit exactly what the server reads.
func checkServerRequestExample(ex example, q rpc.ServerRequestInfo) error {
	raw := json.RawMessage(ex.JSON)
	switch ex.Kind {
	case "request":
		var req wireRequest
		if err := decodeStrict(raw, reflect.TypeFor[wireRequest]()); err != nil {
			return fmt.Errorf("not a JSON-RPC request: %w", err)
		}
		_ = json.Unmarshal(raw, &req)
		var id string
		if req.JSONRPC != "2.0" || req.Method != ex.Method || json.Unmarshal(req.ID, &id) != nil || !strings.HasPrefix(id, rpc.ServerRequestIDPrefix) {
			return fmt.Errorf("want jsonrpc 2.0, method %s and a server id %q…, got %s", ex.Method, rpc.ServerRequestIDPrefix, raw)
		}
		if err := decodeStrict(req.Params, q.Params); err != nil {
			return fmt.Errorf("params do not fit %v: %w", q.Params, err)
		}
	case "response":
		var resp wireResponse
		if err := decodeStrict(raw, reflect.TypeFor[wireResponse]()); err != nil {
			return fmt.Errorf("not a JSON-RPC response: %w", err)
		}
		_ = json.Unmarshal(raw, &resp)
		if resp.JSONRPC != "2.0" || resp.Result == nil {
			return errors.New("a client's answer has jsonrpc 2.0 and a result")
		}
		if err := decodeStrict(resp.Result, q.Result); err != nil {
			return fmt.Errorf("result does not fit %v: %w", q.Result, err)
		}
	default:
		return fmt.Errorf("%s is a request the server sends: its examples are a request and a response", ex.Method)
	}
	return nil
}

func byName(reg *rpc.Registry) (map[string]rpc.MethodInfo, map[string]rpc.NotificationInfo) {
	methods := map[string]rpc.MethodInfo{}
	for _, m := range reg.Methods() {
		methods[m.Name] = m
	}
	notes := map[string]rpc.NotificationInfo{}
	for _, n := range reg.Notifications() {
		notes[n.Name] = n
	}
	return methods, notes
}

func TestEveryRegisteredMethodAndNotificationHasAHeadingInTheProtocolDoc(t *testing.T) {
	doc := loadDoc(t)
	reg := registry(t)
	methods, notes := byName(reg)
	require.NotEmpty(t, methods)
	hasHeading := func(name string) bool {
		for _, h := range doc.Headings {
			if strings.Contains(h, "`"+name+"`") {
				return true
			}
		}
		return false
	}
	for name := range methods {
		assert.True(t, hasHeading(name), "the protocol docs have no heading for method `%s`", name)
	}
	for name := range notes {
		assert.True(t, hasHeading(name), "the protocol docs have no heading for notification `%s`", name)
	}
	for name := range serverRequests(reg) {
		assert.True(t, hasHeading(name), "the protocol docs have no heading for server request `%s`", name)
	}
}

func TestEveryMethodHasARealRequestAndResponseExample(t *testing.T) {
	doc := loadDoc(t)
	reg := registry(t)
	methods, notes := byName(reg)
	seen := map[string]bool{}
	for _, ex := range doc.JSON {
		seen[ex.Method+" "+ex.Kind] = true
	}
	for name, m := range methods {
		if m.AliasOf != "" {
			continue // same shapes as the target's examples
		}
		assert.True(t, seen[name+" request"], "no `<!-- example: %s request -->` block", name)
		assert.True(t, seen[name+" response"], "no `<!-- example: %s response -->` block", name)
	}
	for name := range notes {
		assert.True(t, seen[name+" notification"], "no `<!-- example: %s notification -->` block", name)
	}
	for name := range serverRequests(reg) {
		assert.True(t, seen[name+" request"], "no `<!-- example: %s request -->` block (what the server sends)", name)
		assert.True(t, seen[name+" response"], "no `<!-- example: %s response -->` block (the client's answer)", name)
	}
}

func TestEveryJSONBlockParsesAndEveryExampleFitsTheRegisteredTypes(t *testing.T) {
	doc := loadDoc(t)
	reg := registry(t)
	require.NotEmpty(t, doc.JSON)
	for _, ex := range doc.JSON {
		if !json.Valid([]byte(ex.JSON)) {
			t.Errorf("%s:%d: the json block does not parse", ex.File, ex.Line)
			continue
		}
		if ex.Method == "" {
			continue
		}
		if err := checkExample(ex, reg); err != nil {
			t.Errorf("%s:%d: %s %s example: %v", ex.File, ex.Line, ex.Method, ex.Kind, err)
		}
	}
}

func TestTheErrorTableIsTheRegistrysCodeTable(t *testing.T) {
	b := []byte(protocolText(t))
	table := registry(t).Codes()
	rowRE := regexp.MustCompile("(?m)^\\| `?(-32[0-9]{3})`? \\| `([a-z_]+)` \\|")
	rows := map[string]string{}
	for _, m := range rowRE.FindAllStringSubmatch(string(b), -1) {
		rows[m[1]] = m[2]
	}
	for _, c := range table {
		assert.Equal(t, c.Name, rows[fmt.Sprint(c.Code)], "error table row for %d", c.Code)
	}
	assert.Len(t, rows, len(table), "the document has codes the registry does not")
}

// The access-class table is the registry's: a method whose class changes,
// or a method added, cannot leave the document behind.
func TestTheAccessTableIsEveryMethodsRegisteredClass(t *testing.T) {
	b := []byte(protocolText(t))
	rowRE := regexp.MustCompile("(?m)^\\| `([a-z_.]+)` \\| `(read|agents|write|approve|host)`( \\(raised by its params, above\\))? \\|$")
	rows, raised := map[string]string{}, map[string]bool{}
	for _, m := range rowRE.FindAllStringSubmatch(string(b), -1) {
		rows[m[1]] = m[2]
		raised[m[1]] = m[3] != ""
	}
	methods := registry(t).Methods()
	rules := map[string]string{}
	for _, m := range methods {
		assert.Equal(t, string(m.Doc.Access), rows[m.Name], "access table row for %s", m.Name)
		assert.Equal(t, len(m.Doc.AccessRules) > 0, raised[m.Name], "access table row for %s says whether its params raise its class", m.Name)
		for _, r := range m.Doc.AccessRules {
			v := "any"
			if r.Value != nil {
				j, err := json.Marshal(r.Value)
				require.NoError(t, err)
				v = "`" + string(j) + "`"
			}
			rules["`"+r.Param+"` | "+v] = string(r.Access)
		}
	}
	assert.Len(t, rows, len(methods), "the access table has methods the registry does not")
	// The rules table: one row per rule, param | value | class.
	ruleRE := regexp.MustCompile("(?m)^\\| (`[a-z_]+` \\| (?:`[^`]+`|any)) \\| `(write|approve|host|agents|read)`")
	doc := map[string]string{}
	for _, m := range ruleRE.FindAllStringSubmatch(string(b), -1) {
		doc[m[1]] = m[2]
	}
	assert.Equal(t, rules, doc, "the access rules table is the registry's")
}

func TestTheDocStatesTheCurrentProtocolVersion(t *testing.T) {
	b := []byte(protocolText(t))
	assert.Contains(t, string(b), fmt.Sprintf("`protocol_version` is `%s`", daemon.ProtocolVersion))
}

// The checker itself must be able to fail, or the tests above prove nothing.
func TestTheExampleCheckerRefusesDriftedExamples(t *testing.T) {
	reg := registry(t)
	bad := []example{
		{Method: "agents.detect", Kind: "request", JSON: `{"jsonrpc":"2.0","id":1,"method":"agents.detect","params":{"include_helth":true}}`},
		{Method: "agents.detect", Kind: "request", JSON: `{"jsonrpc":"2.0","id":1,"method":"agents.list_external","params":{}}`},
		{Method: "agents.detect", Kind: "request", JSON: `{"jsonrpc":"2.0","method":"agents.detect","params":{}}`},
		{Method: "daemon.info", Kind: "response", JSON: `{"jsonrpc":"2.0","id":1,"result":{"version":"1","renamed_field":2}}`},
		{Method: "daemon.info", Kind: "response", JSON: `{"jsonrpc":"2.0","id":1,"error":{"code":-32016,"message":"no run"}}`},
		{Method: "daemon.info", Kind: "response", JSON: `{"jsonrpc":"2.0","id":1,"error":{"code":-32099,"message":"?"}}`},
		{Method: "no.such", Kind: "request", JSON: `{"jsonrpc":"2.0","id":1,"method":"no.such"}`},
	}
	bad = append(bad,
		example{Method: "agents.approve", Kind: "request", JSON: `{"jsonrpc":"2.0","id":1,"method":"agents.approve","params":{"run_id":"r"}}`},
		example{Method: "agents.approve", Kind: "request", JSON: `{"jsonrpc":"2.0","id":"card-1","method":"agents.approve","params":{"run":"r"}}`},
		example{Method: "agents.approve", Kind: "response", JSON: `{"jsonrpc":"2.0","id":"card-1","result":{"decision":"allow","remember":true}}`},
		example{Method: "agents.approve", Kind: "notification", JSON: `{"jsonrpc":"2.0","method":"agents.approve","params":{}}`},
	)
	for _, ex := range bad {
		assert.Error(t, checkExample(ex, reg), "%s", ex.JSON)
	}
	assert.NoError(t, checkExample(example{Method: "agents.approve", Kind: "response",
		JSON: `{"jsonrpc":"2.0","id":"card-1","result":{"decision":"deny","message":"no"}}`}, reg))
	good := example{Method: "daemon.info", Kind: "request", JSON: `{"jsonrpc":"2.0","id":1,"method":"daemon.info","params":{}}`}
	assert.NoError(t, checkExample(good, reg))

	d, err := parseDoc("## `x`\n\n<!-- example: daemon.info request -->\n```json\n{\"a\":1}\n```\n```json\n{}\n```\n")
	require.NoError(t, err)
	require.Len(t, d.JSON, 2)
	assert.Equal(t, "daemon.info", d.JSON[0].Method)
	assert.Empty(t, d.JSON[1].Method, "a marker applies to the next block only")
}

// TestCaptureExamples talks to a live daemon and writes what it answered
// as marked examples to $CARD_DOCS_CAPTURE, for pasting into protocol.md.
func TestCaptureExamples(t *testing.T) {
	out := os.Getenv("CARD_DOCS_CAPTURE")
	if out == "" {
		testskip.Skip(t, testskip.DocsCapture, "set CARD_DOCS_CAPTURE=FILE to capture protocol examples from a live daemon")
	}
	home := filepath.Join(os.TempDir(), "card-example-home")
	_ = os.RemoveAll(home)
	t.Cleanup(func() { _ = os.RemoveAll(home) })
	d := startDaemon(t, home)
	ws := d.Raw(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ws.SetReadLimit(16 << 20)

	c := &capturer{t: t, ctx: ctx, ws: ws}
	call := c.call
	// Let the background detection finish, so the answers are stable.
	call("agents.detect", `{"refresh":true}`)
	for _, c := range []struct{ method, params string }{
		{"daemon.info", ""},
		{"agents.list_external", ""},
		{"agents.detect_external", `{"invoked_by":"claude-code"}`},
		{"agents.detect", `{"include_health":true,"invoked_by":"codex"}`},
		{"agents.health_external", `{"id":"claude-code"}`},
		{"agents.health_external", `{"id":"gemini"}`},
		{"agents.health_external", `{"id":"no-such-agent"}`},
		{"agents.health_external", `{}`},
		{"agents.invoke_external", `{"id":"gemini","task":"say pong","mcp_endpoint":"http://127.0.0.1:8765/mcp"}`},
		{"rpc.discover", ""},
		{"substrate.info", ""},
		{"substrate.run_command", `{"command":"echo hello","timeout_secs":5}`},
		{"substrate.write_text", `{"path":"` + home + `/notes.txt","content":"hello\n"}`},
		{"substrate.read_text", `{"path":"` + home + `/notes.txt"}`},
		{"substrate.read_text", `{"path":"notes.txt"}`},
		{"substrate.write_bytes", `{"path":"` + home + `/blob.bin","content_b64":"AAEC"}`},
		{"substrate.read_bytes", `{"path":"` + home + `/blob.bin","offset":1,"length":2}`},
		{"substrate.path_state", `{"path":"` + home + `/missing"}`},
		{"substrate.pty_start", `{"command":"cat"}`},
	} {
		res := call(c.method, c.params)
		if c.method == "substrate.pty_start" && res != nil {
			var p struct {
				PID int `json:"pid"`
			}
			require.NoError(t, json.Unmarshal(res, &p))
			pid := fmt.Sprint(p.PID)
			call("substrate.pty_input", `{"pid":`+pid+`,"data":"hi\n"}`)
			time.Sleep(200 * time.Millisecond)
			call("substrate.pty_read", `{"pid":`+pid+`}`)
			call("substrate.pty_resize", `{"pid":`+pid+`,"rows":40,"cols":120}`)
			call("substrate.pty_kill", `{"pid":`+pid+`}`)
		}
	}
	captureRuns(c, home)
	captureCAR(c, home, d.URL, d.Token)
	captureSessions(c, home)
	captureIsolation(c)
	call("runs.prune", `{"max_age_days":106752}`)
	captureUnusable(t, c)

	// Transport examples: frames that are not one well-formed request.
	raw := func(name, frame string) {
		require.NoError(t, ws.Write(ctx, websocket.MessageText, []byte(frame)))
		_, msg, err := ws.Read(ctx)
		require.NoError(t, err)
		fmt.Fprintf(&c.buf, "<!-- raw: %s -->\n```\n%s\n```\n```\n%s\n```\n\n", name, frame, msg)
	}
	raw("parse", `{"jsonrpc":"2.0","method":"foobar,"params":"bar","baz]`)
	raw("batch", `[{"jsonrpc":"2.0","id":101,"method":"daemon.info"},{"jsonrpc":"2.0","method":"daemon.info"},{"jsonrpc":"2.0","id":102,"method":1}]`)
	raw("duplicate method", `{"jsonrpc":"2.0","id":7,"method":"daemon.info","method":"runs.prune"}`)
	raw("duplicate result", `{"jsonrpc":"2.0","id":"card-1","result":{"decision":"deny"},"result":{"decision":"allow"}}`)
	// A waiting invoke withdrawn with $/cancelRequest by the id it was sent with.
	slow := fmt.Sprintf(`{"jsonrpc":"2.0","id":"invoke-7","method":"agents.invoke","params":{"id":"claude-code","task":"SLOW: think for a long time.","cwd":%q}}`, home)
	withdraw := `{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":"invoke-7"}}`
	require.NoError(t, ws.Write(ctx, websocket.MessageText, []byte(slow)))
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, ws.Write(ctx, websocket.MessageText, []byte(withdraw)))
	_, msg, err := ws.Read(ctx)
	require.NoError(t, err)
	fmt.Fprintf(&c.buf, "<!-- raw: cancel -->\n```\n%s\n%s\n```\n```\n%s\n```\n\n", slow, withdraw, msg)
	disc, err := os.ReadFile(filepath.Join(home, "daemon.json"))
	require.NoError(t, err)
	fmt.Fprintf(&c.buf, "<!-- raw: daemon.json -->\n```\n%s\n```\n\n", bytes.TrimSpace(disc))
	require.NoError(t, os.WriteFile(out, c.buf.Bytes(), 0o644))
}

// captureUnusable asks a second daemon, whose Gemini pin names a file that
// is not executable, for a fresh detection: the example of the health a
// broken install carries without include_health.
func captureUnusable(t *testing.T, c *capturer) {
	home := filepath.Join(os.TempDir(), "card-example-home-2")
	_ = os.RemoveAll(home)
	t.Cleanup(func() { _ = os.RemoveAll(home) })
	require.NoError(t, os.MkdirAll(home, 0o700))
	gemini := filepath.Join(home, "gemini")
	require.NoError(t, os.WriteFile(gemini, []byte("#!/bin/sh\n"), 0o644))
	ws := startDaemon(t, home, agent.Gemini, gemini).Raw(t)
	ws.SetReadLimit(16 << 20)
	saved := c.ws
	c.ws = ws
	defer func() { c.ws = saved }()
	c.call("agents.detect_external", "")
}

// capturer sends requests to a live daemon and records every frame as a
// marked example.
type capturer struct {
	t   *testing.T
	ctx context.Context
	ws  *websocket.Conn
	buf bytes.Buffer
	id  int
	// quiet drops notifications (a replay would repeat the run's events).
	quiet bool
	// chatEnded is set when a terminal agents.chat.event is read.
	chatEnded bool
	// sessionEnds counts the terminal sessions.event notifications read.
	sessionEnds int
}

func (c *capturer) emit(method, kind string, raw []byte) {
	var b bytes.Buffer
	require.NoError(c.t, json.Indent(&b, raw, "", "  "))
	fmt.Fprintf(&c.buf, "<!-- example: %s %s -->\n```json\n%s\n```\n\n", method, kind, b.String())
}

// read returns the next frame's method (for a notification) or id, and the
// frame, recording notifications.
func (c *capturer) read() (method string, id int, result json.RawMessage, msg []byte) {
	_, msg, err := c.ws.Read(c.ctx)
	require.NoError(c.t, err)
	var probe struct {
		ID     *int            `json:"id"`
		Method string          `json:"method"`
		Result json.RawMessage `json:"result"`
	}
	require.NoError(c.t, json.Unmarshal(msg, &probe))
	if probe.Method != "" {
		c.noteChat(msg)
		c.noteSession(probe.Method, msg)
		if !c.quiet {
			c.emit(probe.Method, "notification", msg)
		}
		return probe.Method, 0, nil, msg
	}
	if probe.ID != nil {
		id = *probe.ID
	}
	return "", id, probe.Result, msg
}

// call sends one request and records it, the notifications that arrive
// before its answer, and the answer.
func (c *capturer) call(method, params string) json.RawMessage {
	c.id++
	req := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q`, c.id, method)
	if params != "" {
		req += `,"params":` + params
	}
	req += "}"
	fmt.Fprintf(&c.buf, "### %s\n\n", method)
	c.emit(method, "request", []byte(req))
	require.NoError(c.t, c.ws.Write(c.ctx, websocket.MessageText, []byte(req)))
	for {
		m, id, result, msg := c.read()
		if m == "" && id == c.id {
			c.emit(method, "response", msg)
			return result
		}
	}
}

// drainRun reads notifications until the run's terminal event.
func (c *capturer) drainRun() {
	for {
		m, _, _, msg := c.read()
		if m != "agents.event" {
			continue
		}
		var ev struct {
			Kind string `json:"kind"`
		}
		var note struct {
			Params json.RawMessage `json:"params"`
		}
		require.NoError(c.t, json.Unmarshal(msg, &note))
		require.NoError(c.t, json.Unmarshal(note.Params, &ev))
		if ev.Kind == "done" || ev.Kind == "error" {
			return
		}
	}
}

// discoverInto calls rpc.discover on a real daemon's registry and decodes
// the document as it would go on the wire into doc; it returns the registry.
func discoverInto(t *testing.T, doc any) *rpc.Registry {
	t.Helper()
	reg := registry(t)
	res, _, rerr := reg.Dispatch(context.Background(), rpcclient.DiscoverMethod, nil)
	require.Nil(t, rerr)
	raw, err := json.Marshal(res)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, doc))
	return reg
}

func TestRPCDiscoverOfTheRealDaemonListsEveryRegisteredMethodAndTheEventNotification(t *testing.T) {
	var doc struct {
		OpenRPC string `json:"openrpc"`
		Methods []struct {
			Name string `json:"name"`
		} `json:"methods"`
		Notifications []struct {
			Name string `json:"name"`
		} `json:"x-notifications"`
		ServerRequests []struct {
			Name string `json:"name"`
		} `json:"x-server-requests"`
	}
	reg := discoverInto(t, &doc)
	assert.True(t, strings.HasPrefix(doc.OpenRPC, "1."))
	listed := map[string]bool{}
	for _, m := range doc.Methods {
		listed[m.Name] = true
	}
	for _, m := range reg.Methods() {
		assert.True(t, listed[m.Name], "rpc.discover does not list %s", m.Name)
	}
	assert.Len(t, doc.Methods, len(reg.Methods()))
	assert.Len(t, doc.Notifications, len(reg.Notifications()))
	require.Len(t, doc.ServerRequests, len(reg.ServerRequests()))
	assert.Equal(t, "agents.approve", doc.ServerRequests[0].Name)
}

// Every result says its shape (none is the empty "anything" schema), and no
// schema a result or a notification reaches forbids additive fields: the
// daemon adds fields to its answers under the same protocol version, and a
// client validating against a closed schema would break on that.
func TestRPCDiscoverDescribesEveryResultAndLeavesResultsOpen(t *testing.T) {
	var doc struct {
		Methods []struct {
			Name   string `json:"name"`
			Result struct {
				Schema map[string]any `json:"schema"`
			} `json:"result"`
		} `json:"methods"`
		Notifications []struct {
			Name   string `json:"name"`
			Params []struct {
				Schema any `json:"schema"`
			} `json:"params"`
		} `json:"x-notifications"`
		Components struct {
			Schemas map[string]any `json:"schemas"`
		} `json:"components"`
	}
	discoverInto(t, &doc)
	// closedAt walks a schema and the definitions it references and names
	// the first that says additionalProperties: false.
	var closedAt func(v any, seen map[string]bool) string
	closedAt = func(v any, seen map[string]bool) string {
		switch x := v.(type) {
		case map[string]any:
			if x["additionalProperties"] == false {
				return "an inline object"
			}
			if ref, ok := x["$ref"].(string); ok {
				name := strings.TrimPrefix(ref, "#/components/schemas/")
				if seen[name] {
					return ""
				}
				seen[name] = true
				def := doc.Components.Schemas[name]
				if m, ok := def.(map[string]any); ok && m["additionalProperties"] == false {
					return name
				}
				if where := closedAt(def, seen); where != "" {
					return where
				}
			}
			for _, e := range x {
				if where := closedAt(e, seen); where != "" {
					return where
				}
			}
		case []any:
			for _, e := range x {
				if where := closedAt(e, seen); where != "" {
					return where
				}
			}
		}
		return ""
	}
	require.NotEmpty(t, doc.Methods)
	for _, m := range doc.Methods {
		assert.NotEmpty(t, m.Result.Schema, "%s publishes {} for its result", m.Name)
		assert.Empty(t, closedAt(m.Result.Schema, map[string]bool{}), "%s's result forbids additive fields", m.Name)
	}
	for _, n := range doc.Notifications {
		for _, p := range n.Params {
			assert.Empty(t, closedAt(p.Schema, map[string]bool{}), "notification %s forbids additive fields", n.Name)
		}
	}
}

// The doc carries each method's summary and description as the registry has
// them, so a change to one (a new check in a method's gate order) cannot
// leave the other behind.
func TestEveryMethodsSummaryAndDescriptionAreInTheProtocolDoc(t *testing.T) {
	b := []byte(protocolText(t))
	text := string(b)
	for _, m := range registry(t).Methods() {
		if m.AliasOf != "" {
			continue
		}
		assert.Contains(t, text, m.Doc.Summary, "%s's summary", m.Name)
		if m.Doc.Description != "" {
			assert.Contains(t, text, m.Doc.Description, "%s's description", m.Name)
		}
	}
	for _, q := range registry(t).ServerRequests() {
		assert.Contains(t, text, q.Doc.Summary, "%s's summary", q.Name)
		assert.Contains(t, text, q.Doc.Description, "%s's description", q.Name)
	}
}
