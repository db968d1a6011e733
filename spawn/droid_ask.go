package spawn

import (
	"strings"

	"github.com/card-dev/card/agent"
)

// Droid in ask mode, as checked against Droid 0.225.2 (protocol 1.220.0)
// with a loopback model stand-in:
//
//   - exec --input-format stream-jsonrpc --output-format stream-jsonrpc:
//     Droid asks with droid.request_permission (droid_jsonrpc.go). Its
//     one-shot stream-json mode cannot ask: a blocked action fails.
//   - The session is opened with autonomyLevel "off" and interactionMode
//     "auto" in droid.initialize_session, whatever the user's own settings
//     say: at "off" Droid runs Read, LS, Grep and Glob unasked (also
//     outside the working dir, as in read_only) and asks for every
//     Execute, even `cat`, and every Create, Edit and ApplyPatch.
//   - -m and -r on argv are ignored in this mode (a run with -m used
//     Droid's default model; `droid exec --help`: "CLI flags do not
//     configure JSON-RPC sessions"): the model and the reasoning effort go
//     in droid.initialize_session, and a -m/--model or -r/--reasoning-effort
//     the operator put in the adapter's args is carried there too, so it
//     holds in every channel as it does one-shot.
//   - A deny is answered "cancel": Droid marks the call cancelled by the
//     user and ends the turn without calling the model again.
//   - resume loads the session with droid.load_session (droid_jsonrpc.go),
//     never on argv.
//   - system_prompt and allowed_tools are refused: the argv flags that
//     carry them in read_only were not seen to act in this mode.
func buildDroidAsk(bin string, req Request) (Plan, error) {
	if req.AllowedTools != nil {
		return Plan{}, errUnsupported("allowed_tools", agent.Droid, "in ask mode Droid's own autonomy level decides what is asked; send allowed_tools in read_only")
	}
	if req.SystemPrompt != "" {
		return Plan{}, errUnsupported("system_prompt", agent.Droid, "in ask mode Droid takes no --append-system-prompt-file; send system_prompt in read_only")
	}
	p := Plan{Program: bin, Dir: req.Cwd, Env: extraEnv(req.Extras)}
	args := []string{"exec"}
	args = append(args, req.Extras.Args...)
	args = append(args, "--input-format", "stream-jsonrpc", "--output-format", "stream-jsonrpc")
	model, effort := req.Model, req.Effort
	if model == "" {
		model = argValue(req.Extras.Args, "-m", "--model")
	}
	if effort == "" {
		effort = argValue(req.Extras.Args, "-r", "--reasoning-effort")
	}
	p.Args = args
	p.Ask = &AskPlan{Channel: AskViaSession}
	p.Session = &SessionPlan{Protocol: ProtocolDroidRPC, Adapter: agent.Droid, Model: model, Effort: effort, resume: req.Resume}
	return p, nil
}

// argValue is the value of the last of flags in args ("-m X" or
// "--model=X"), or "".
func argValue(args []string, flags ...string) string {
	var v string
	for i, a := range args {
		for _, f := range flags {
			switch {
			case a == f && i+1 < len(args):
				v = args[i+1]
			case strings.HasPrefix(a, f+"="):
				v = strings.TrimPrefix(a, f+"=")
			}
		}
	}
	return v
}
