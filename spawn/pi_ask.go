package spawn

import (
	"strings"

	"github.com/card-dev/card/agent"
)

// buildPiAsk is Pi in ask mode, as checked against Pi 0.73.1 with a
// loopback model stand-in: `pi --mode rpc` (pi_rpcmode.go) with card's gate
// extension loaded by -e from the run's private dir, and --no-extensions
// so none of the user's or the project's load (an explicit -e still
// does). The model is handed every built-in tool; read, grep, find and ls
// run unasked, as in read_only, and every other call (bash, edit, write)
// is asked. The rest of the sealing is buildPi's, and the session (session,
// id: piSession) as in every mode.
func buildPiAsk(bin string, req Request, tools, session []string, id string) Plan {
	p := Plan{Program: bin, Dir: req.Cwd, Env: extraEnv(req.Extras), SessionID: id, NoSessionID: id == ""}
	p.Env["PI_OFFLINE"] = "1"
	args := append([]string{}, req.Extras.Args...)
	args = append(args, "--mode", "rpc")
	args = append(args, session...)
	args = append(args,
		"-nc",
		"--no-extensions",
		"-e", p.privateFile(piAskGateFile, piAskGate),
		"--no-skills",
		"--no-prompt-templates",
		"--no-themes",
		"--offline",
	)
	if len(tools) == 0 {
		args = append(args, "--no-tools")
	} else {
		args = append(args, "--tools", strings.Join(tools, ","))
	}
	if req.Model != "" {
		args = append(args, "--model", req.Model)
	}
	if req.Effort != "" {
		args = append(args, "--thinking", req.Effort)
	}
	args = append(args, p.systemPromptFlag(req, "system-prompt.md", "--system-prompt", "--append-system-prompt")...)
	// Images go in the prompt command, as base64.
	p.Input = Input{Images: req.Images}
	p.OutputAllowance = echoAllowance(req.Images, 3)
	p.Args = args
	p.Ask = &AskPlan{Channel: AskViaSession}
	p.Session = &SessionPlan{Protocol: ProtocolPiRPC, Adapter: agent.Pi}
	return p
}
