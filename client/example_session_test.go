package client_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/client"
)

// A session is one conversation across turns: each PromptSession is a
// turn that continues the one before it (the agent remembers), and one
// SubscribeSession follows every turn's events with a seq that counts
// across turns, so a client that reconnects passes the last seq it saw
// and misses nothing. A prompt sent while a turn runs waits in the
// session's queue.
func ExampleClient_PromptSession() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, client.Options{})
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	defer c.Close()

	cwd, _ := os.Getwd()
	s, err := c.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "codex", Cwd: cwd}})
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	defer c.CloseSession(context.Background(), s.SessionID)

	ended := make(chan int, 8)
	var lastSeq int64 // what a reconnecting client would pass as after_seq
	_, err = c.SubscribeSession(ctx, api.SessionSubscribeParams{SessionID: s.SessionID}, func(ev api.SessionEvent) {
		lastSeq = ev.Seq
		if ev.Event.Kind == "text" {
			fmt.Print(ev.Event.Text)
		}
		if client.Terminal(ev.Event) {
			ended <- ev.Turn
		}
	})
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	for _, task := range []string{"Remember the number 7.", "Which number did I ask you to remember?"} {
		if _, err := c.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: task}); err != nil {
			fmt.Println("error:", err)
			return
		}
		select {
		case turn := <-ended:
			fmt.Printf("\nturn %d ended\n", turn)
		case <-ctx.Done():
			return
		}
	}
	fmt.Println("the session's next event will be seq", lastSeq+1)
}
