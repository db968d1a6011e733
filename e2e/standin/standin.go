// Package standin serves just enough of each vendor's model API on 127.0.0.1
// for a real agent CLI (Claude Code, Codex, Gemini CLI, Copilot, Pi, Droid,
// OpenCode, Qwen Code) to finish one turn with a scripted answer, or to meet
// a scripted API error.
//
// End-to-end tests need the real CLIs, because only they prove that card's argv,
// env and output parsers match what ships on npm; but a test that talks to the
// real vendors needs credentials, costs money and flakes with the network. A
// loopback stand-in keeps the CLI real and the answer deterministic, and its
// request log lets a test prove the CLI really called it instead of failing
// somewhere before the API.
package standin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Vendor names the wire dialect a Server speaks.
type Vendor string

const (
	// Anthropic is the Messages API (Claude Code, Pi's anthropic-messages, Copilot BYOK "anthropic").
	Anthropic Vendor = "anthropic"
	// OpenAI is the Responses API plus Chat Completions (Codex, Copilot BYOK "openai", Pi, OpenCode, Qwen Code).
	OpenAI Vendor = "openai"
	// Gemini is the Generative Language API v1beta (Gemini CLI).
	Gemini Vendor = "gemini"
)

// APIKey is the fake credential every helper hands the CLIs. The stand-ins
// never check it: the point is that the CLI believes it is signed in.
const APIKey = "sk-card-standin-not-a-secret"

// Script says how a Server answers model calls.
type Script struct {
	// Answer is the text of the model's reply, streamed in a few deltas.
	// Empty means "PONG from card stand-in".
	Answer string
	// Status is 0 (or 200) for a successful turn; 401, 403, 429, 500 and
	// other codes answer every model call with that vendor's error body.
	Status int
	// RetryAfter is sent in retry-after headers (and Gemini's RetryInfo) on
	// 429s. Zero sends "0" so a CLI that honours it retries at once and a
	// test bounded by the CLI's retry knob stays fast.
	RetryAfter time.Duration
	// Message overrides the error message of a scripted error.
	Message string
	// InputTokens and OutputTokens are reported as usage (defaults 10 and 5).
	InputTokens, OutputTokens int
	// ToolCalls make the model call tools before it answers (every
	// dialect: Anthropic, Gemini, OpenAI Responses and Chat Completions):
	// a model call whose conversation holds k tool results (Gemini:
	// function responses), k below len(ToolCalls), and that
	// offers ToolCalls[k].Name as a tool, is answered with that tool call;
	// once the last is answered, the text answer quotes the last tool
	// result ("<Answer> | tool result was: is_error=… content=…"), so a
	// test can see what the agent was told. Side calls that offer no tools
	// get the plain answer.
	ToolCalls []ToolCall
	// Stall makes a streamed model call send its first event and then hold
	// the stream open, sending nothing more, until the client goes away or the
	// server closes: the shape of a hung vendor, for deadline and cancel tests
	// with a real CLI.
	Stall bool
	// Thinking, when set, is streamed before the answer as a thinking block
	// (thinking_delta pieces and a signature), the shape of a model with
	// extended thinking. Anthropic dialect only.
	Thinking string
	// DeltaDelay is the pause before each piece of a streamed answer after
	// the first, the shape of a model writing slowly: a test can then tell
	// text that reaches a client as it is written from text that arrives
	// only when the turn ends.
	DeltaDelay time.Duration
	// FirstDeltaDelay is the pause before a streamed answer's first piece:
	// the shape of a model slow to begin, so a client can see a run wait
	// for the API after a retry.
	FirstDeltaDelay time.Duration
	// FailFirst, with Status set, answers only the first FailFirst model
	// calls with the error and every later one as a successful turn: the
	// shape of an overloaded or rate-limited API that recovers, for a CLI
	// that retries.
	FailFirst int
	// Headers are sent with every answer to a model call, the error ones
	// included: a vendor's rate-limit headers (Anthropic's
	// anthropic-ratelimit-unified-*, OpenAI's x-codex-primary-*), so a
	// test sees what a CLI makes of them.
	Headers http.Header
	// AnswerUserMessages answers each model call with the number of user
	// messages it carried (see UserMessages), instead of Answer.
	AnswerUserMessages bool
}

// ToolCall is a tool call the stand-in's model makes.
type ToolCall struct {
	Name  string
	Input map[string]any
}

func (s Script) answer() string {
	if s.Answer == "" {
		return "PONG from card stand-in"
	}
	return s.Answer
}

func (s Script) failing() bool { return s.Status != 0 && s.Status != http.StatusOK }

// callKey carries a model call's number (1 for the first) in its request's
// context.
type callKey struct{}

// failing says whether this model call gets the scripted error: every one,
// or with FailFirst only the first FailFirst.
func (s *Server) failing(r *http.Request) bool {
	if !s.script.failing() {
		return false
	}
	n, _ := r.Context().Value(callKey{}).(int64)
	return s.script.FailFirst <= 0 || n <= int64(s.script.FailFirst)
}

func (s Script) usage() (in, out int) {
	in, out = s.InputTokens, s.OutputTokens
	if in == 0 {
		in = 10
	}
	if out == 0 {
		out = 5
	}
	return in, out
}

// deltas splits the answer into a few chunks so parsers that only handle a
// single delta, or that forget to join them, fail against the stand-in too.
func (s Script) deltas() []string {
	a := s.answer()
	words := strings.SplitAfter(a, " ")
	if len(words) <= 1 && len(a) > 1 {
		return []string{a[:len(a)/2], a[len(a)/2:]}
	}
	return words
}

// Recorded is one request the CLI made. Credential headers keep their name
// but lose their value, so a test can assert a key was sent without the log
// ever holding one.
type Recorded struct {
	Method string
	Path   string
	Query  string
	Header http.Header
	Body   []byte
	// Status is what the stand-in answered.
	Status int
}

// JSON decodes the recorded body into v.
func (r Recorded) JSON(v any) error { return json.Unmarshal(r.Body, v) }

// redactedHeaders are dropped to a placeholder: they carry API keys and
// bearer tokens in every dialect served here.
var redactedHeaders = []string{"Authorization", "X-Api-Key", "X-Goog-Api-Key", "Api-Key", "Cookie", "Proxy-Authorization"}

// Redacted is what a credential header's value becomes in a Recorded request.
const Redacted = "[redacted]"

// maxBody bounds what one request may make the stand-in hold in memory.
const maxBody = 8 << 20

// Server is one running stand-in. Close is registered with t.Cleanup.
type Server struct {
	// URL is the server root, e.g. http://127.0.0.1:39123 (no trailing slash).
	URL    string
	Vendor Vendor
	// Model is the model id the CLI helpers ask for.
	Model string

	script Script
	calls  atomic.Int64 // model calls served so far
	srv    *httptest.Server
	done   chan struct{} // closed by Close; releases stalled streams
	once   sync.Once
	mu     sync.Mutex
	reqs   []Recorded
}

// Requests returns a copy of every request served so far, in arrival order.
func (s *Server) Requests() []Recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Recorded(nil), s.reqs...)
}

// ModelCalls returns the requests that asked for a model turn (the endpoints
// that carry a prompt), leaving out discovery and token counting.
func (s *Server) ModelCalls() []Recorded {
	var out []Recorded
	for _, r := range s.Requests() {
		if isModelCall(s.Vendor, r.Path) {
			out = append(out, r)
		}
	}
	return out
}

func isModelCall(v Vendor, path string) bool {
	switch v {
	case Anthropic:
		return strings.HasSuffix(path, "/v1/messages")
	case OpenAI:
		return strings.HasSuffix(path, "/responses") || strings.HasSuffix(path, "/chat/completions")
	case Gemini:
		return strings.HasSuffix(path, ":streamGenerateContent") || strings.HasSuffix(path, ":generateContent")
	}
	return false
}

// Close stops the server; safe to call more than once.
func (s *Server) Close() {
	// httptest.Server.Close waits for handlers, so stalled streams are
	// released first or Close would hang.
	s.once.Do(func() { close(s.done) })
	s.srv.Close()
}

// pace waits DeltaDelay before piece i of a streamed answer (none before
// the first), and returns early when the client goes away or the server
// closes.
// The pauses are the script the call began with: a test that changes the
// script mid-answer (for the next turn) does not speed up this one.
func (s *Server) pace(r *http.Request, i int, script Script) {
	d := script.DeltaDelay
	if i == 0 {
		d = script.FirstDeltaDelay
	}
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
	case <-s.done:
	}
}

// stall holds a streaming response open when the script says so.
func (s *Server) stall(r *http.Request) {
	if !s.script.Stall {
		return
	}
	select {
	case <-r.Context().Done():
	case <-s.done:
	}
}

func start(t testing.TB, v Vendor, model string, script Script, h func(*Server, http.ResponseWriter, *http.Request, []byte)) *Server {
	t.Helper()
	s := &Server{Vendor: v, Model: model, script: script, done: make(chan struct{})}
	// httptest binds 127.0.0.1 only: a stand-in must never be reachable
	// from the network, since it answers any caller as a model vendor.
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, maxBody))
		if isModelCall(v, r.URL.Path) {
			r = r.WithContext(context.WithValue(r.Context(), callKey{}, s.calls.Add(1)))
			for k, vs := range script.Headers {
				w.Header()[http.CanonicalHeaderKey(k)] = vs
			}
		}
		// Recorded on arrival, not when answered: a test waiting for a call
		// to come must see it while a slow answer is still being streamed.
		rw := &statusWriter{ResponseWriter: w, s: s, i: s.record(r, body)}
		h(s.forRequest(body), rw, r, body)
	}))
	s.URL = s.srv.URL
	t.Cleanup(s.Close)
	return s
}

// record keeps the request with the status 200 a handler answers by
// default, and returns its index for statusWriter to correct.
func (s *Server) record(r *http.Request, body []byte) int {
	hdr := r.Header.Clone()
	for _, k := range redactedHeaders {
		if hdr.Get(k) != "" {
			hdr.Set(k, Redacted)
		}
	}
	q := r.URL.Query()
	if q.Has("key") {
		q.Set("key", Redacted)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs = append(s.reqs, Recorded{Method: r.Method, Path: r.URL.Path, Query: q.Encode(), Header: hdr, Body: body, Status: http.StatusOK})
	return len(s.reqs) - 1
}

// statusWriter writes the status a handler answers into its request's
// record, before the client can see it.
type statusWriter struct {
	http.ResponseWriter
	s *Server
	i int
}

func (w *statusWriter) WriteHeader(code int) {
	w.s.mu.Lock()
	w.s.reqs[w.i].Status = code
	w.s.mu.Unlock()
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// sse writes Server-Sent Events; JSON payloads go through encoding/json.
type sse struct {
	w http.ResponseWriter
}

func startSSE(w http.ResponseWriter) sse {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	return sse{w: w}
}

// event writes one event; name may be empty for data-only streams (Gemini, chat completions).
func (e sse) event(name string, payload any) {
	var b bytes.Buffer
	if name != "" {
		fmt.Fprintf(&b, "event: %s\n", name)
	}
	data, err := json.Marshal(payload)
	if err != nil {
		panic(err) // payloads are built here from maps of plain values
	}
	fmt.Fprintf(&b, "data: %s\n\n", data)
	_, _ = e.w.Write(b.Bytes())
	if f, ok := e.w.(http.Flusher); ok {
		f.Flush()
	}
}

func (e sse) raw(line string) {
	_, _ = io.WriteString(e.w, line)
	if f, ok := e.w.(http.Flusher); ok {
		f.Flush()
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func retryAfter(w http.ResponseWriter, d time.Duration) {
	w.Header().Set("Retry-After", strconv.Itoa(int(d/time.Second)))
	w.Header().Set("Retry-After-Ms", strconv.FormatInt(d.Milliseconds(), 10))
}

func statusText(code int) string {
	if t := http.StatusText(code); t != "" {
		return t
	}
	return "error"
}
