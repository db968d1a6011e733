package detect

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"time"

	"github.com/card-dev/card/acp"
	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
	"github.com/card-dev/card/internal/proc"
)

// An agent declared in card.toml has no probe of its own: card knows of it
// only that it speaks ACP. Its health is what ACP's opening says: the
// agent starts and answers initialize in the version card speaks, and its
// authMethods say whether it has a sign-in at all. An agent that offers
// none needs none (ready); one that offers some may or may not be signed
// in, and nothing in initialize tells which, so the verdict is unknown
// with what it offers, never a guess either way. card does not open a
// session to find out: that would leave one in the agent's own history on
// every check.

// minACPHealthTimeout bounds an ACP agent's start and initialize when the
// configured health timeout is shorter: Node agents take seconds to start
// (Qwen Code 7–13 s on a busy machine), and a timeout there is not a verdict.
const minACPHealthTimeout = 30 * time.Second

// declaredProbe is the probe of a declared agent.
func declaredProbe(a agent.Adapter) Probe {
	return Probe{
		For:      a.ID,
		AuthKind: func(AuthInput) api.AuthKind { return api.AuthKindUnknown },
		Health: func(ctx context.Context, in HealthInput) HealthVerdict {
			if in.Initialize == nil {
				return HealthVerdict{Status: api.StatusUnknown, Reason: "card could not start " + a.DisplayName + " to ask it over ACP"}
			}
			ini, out := in.Initialize(ctx, a.Declared.Command[1:]...)
			return acpHealthVerdict(a.Declared.Command, ini, out)
		},
	}
}

// acpHealthVerdict judges what an agent answered to initialize; ini is nil
// when no answer came (out says how the process went).
func acpHealthVerdict(command []string, ini *acp.InitializeResponse, out ProbeOutput) HealthVerdict {
	name := strings.Join(command, " ")
	if ini == nil {
		if v, ok := commonHealthFailure(name, out); ok {
			return v
		}
		return HealthVerdict{Status: api.StatusUnknown, Reason: fmt.Sprintf("`%s` did not answer ACP's initialize (exit %d): %s", name, out.ExitCode, firstLine(out.Stderr, out.Stdout))}
	}
	details := map[string]any{}
	if ini.AgentInfo != nil && ini.AgentInfo.Version != "" {
		details["agent_version"] = ini.AgentInfo.Version
	}
	if ini.ProtocolVersion != acp.ProtocolVersion {
		return HealthVerdict{Status: api.StatusUnknown, Details: details,
			Reason: fmt.Sprintf("`%s` speaks ACP version %d; card speaks version %d", name, ini.ProtocolVersion, acp.ProtocolVersion)}
	}
	if len(ini.AuthMethods) == 0 {
		return HealthVerdict{Status: api.StatusReady, Details: details}
	}
	methods := make([]string, 0, len(ini.AuthMethods))
	for _, m := range ini.AuthMethods {
		methods = append(methods, m.ID)
	}
	details["auth_methods"] = methods
	return HealthVerdict{Status: api.StatusUnknown, Details: details,
		Reason: fmt.Sprintf("`%s` answers ACP and offers sign-in (%s), but initialize does not say whether it is signed in; a run tells", name, strings.Join(methods, ", "))}
}

// acpInitialize starts bin with args, sends ACP's initialize on its stdin
// and reads its stdout until the answer, then closes stdin and ends its
// process group. It returns the answer, or nil and how the process went.
func acpInitialize(ctx context.Context, bin string, args, env []string, dir string, timeout time.Duration) (*acp.InitializeResponse, ProbeOutput) {
	if timeout < minACPHealthTimeout {
		timeout = minACPHealthTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	stderr := &proc.Capped{Head: outputLimit}
	cmd := exec.Command(bin, args...)
	cmd.Dir, cmd.Env, cmd.Stderr = dir, env, stderr
	cmd.SysProcAttr = proc.NewGroupKilledWithParent()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, ProbeOutput{ExitCode: -1, StartErr: err}
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, ProbeOutput{ExitCode: -1, StartErr: err}
	}
	if err := proc.Start(cmd); err != nil {
		return nil, ProbeOutput{ExitCode: -1, StartErr: err}
	}
	req, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": acp.MethodInitialize,
		"params": acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersion, ClientInfo: &acp.Implementation{Name: "card", Version: "health"}}})
	answered := make(chan *acp.InitializeResponse, 1)
	var seen strings.Builder
	go func() {
		defer close(answered)
		sc := bufio.NewScanner(io.LimitReader(stdout, outputLimit*16))
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var msg struct {
				ID     json.RawMessage           `json:"id"`
				Result *acp.InitializeResponse   `json:"result"`
				Error  *struct{ Message string } `json:"error"`
			}
			if json.Unmarshal(sc.Bytes(), &msg) != nil || string(msg.ID) != "1" {
				if seen.Len() < 2048 {
					seen.WriteString(sc.Text() + "\n")
				}
				continue
			}
			if msg.Error != nil {
				seen.WriteString("initialize answered with an error: " + msg.Error.Message + "\n")
				return
			}
			answered <- msg.Result
			return
		}
	}()
	_, werr := stdin.Write(append(req, '\n'))
	var ini *acp.InitializeResponse
	if werr == nil {
		select {
		case ini = <-answered:
		case <-ctx.Done():
		}
	}
	_ = stdin.Close()
	// The answer is in: the agent gets its grace to exit on stdin's end,
	// then its whole group is ended.
	endCtx, endCancel := context.WithTimeout(context.Background(), killGrace*3)
	defer endCancel()
	if ini != nil {
		ctx = endCtx
	}
	_ = proc.Wait(ctx, cmd, killGrace)
	for range answered { // the reader is done with seen once stdout has closed
	}
	out := ProbeOutput{Stdout: seen.String(), Stderr: stderr.String(), ExitCode: -1, TimedOut: ini == nil && ctx.Err() != nil}
	if cmd.ProcessState != nil {
		out.ExitCode = cmd.ProcessState.ExitCode()
	}
	return ini, out
}
