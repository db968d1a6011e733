package client_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/client"
)

// Detect lists the agent CLIs the daemon found on this machine, and for
// each whether it can run: a binary the OS refused to execute is listed
// with the reason, so a person can fix or remove that file.
func ExampleClient_Detect() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Dial finds the daemon of $CARD_HOME (or the default home) through
	// its daemon.json and token; a *client.NoDaemonError says how to
	// start one.
	c, err := client.Dial(ctx, client.Options{})
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	defer c.Close()

	agents, err := c.Detect(ctx, api.DetectParams{})
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	for _, a := range agents {
		if why, unusable := a.Execution.UnusableReason(); unusable {
			fmt.Printf("%s: cannot run: %s\n", a.ID, why)
			continue
		}
		fmt.Printf("%s %s at %s\n", a.ID, a.Version, a.BinaryPath)
	}
}

// Stream starts a run and hands its events to a handler as the agent
// works: text as it is written, tool calls, and one terminal event that
// carries the result. The handler runs on the connection's reader, in the
// run's order; keep it quick.
func ExampleClient_Stream() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, client.Options{})
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	defer c.Close()

	cwd, _ := os.Getwd()
	ended := make(chan api.AgentEvent, 1)
	_, err = c.Stream(ctx, api.InvokeParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: cwd}, Task: "Say pong."}, func(ev api.AgentEvent) {
		switch {
		case ev.Kind == "text":
			fmt.Print(ev.Text)
		case ev.Kind == "tool_use" && ev.Tool != nil:
			fmt.Printf("\n[%s]\n", ev.Tool.Name)
		}
		if client.Terminal(ev) {
			ended <- ev
		}
	})
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	select {
	case ev := <-ended:
		fmt.Println()
		fmt.Println("run", ev.Status)
	case <-ctx.Done():
		// Ending the wait does not end the run: Cancel does.
		fmt.Println("error:", ctx.Err())
	}
}

// An ask-mode run puts each tool call the agent wants to make to the
// client that started it: OnApprove answers allow, allow_always (this tool
// for the rest of the run) or deny with a message the agent is told.
// Nobody answering within the approval timeout is a deny.
func ExampleOptions_onApprove() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, client.Options{
		OnApprove: func(ctx context.Context, q api.ApproveParams) (api.ApproveAnswer, error) {
			fmt.Printf("%s asks: %s\n", q.Adapter, q.Summary)
			if q.Tool.Name == "Bash" {
				return api.ApproveAnswer{Decision: "deny", Message: "no shell commands here; edit the file instead"}, nil
			}
			return api.ApproveAnswer{Decision: "allow"}, nil
		},
	})
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	defer c.Close()

	cwd, _ := os.Getwd()
	res, err := c.Invoke(ctx, api.InvokeParams{
		AgentSettings: api.AgentSettings{ID: "claude-code", PermissionMode: "ask", Cwd: cwd},
		Task:          "Create notes.txt saying hi.",
	})
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	fmt.Println("run", res.Status)
}
