package main

import (
	"context"
	"encoding/json"
	"time"
)

// fakeAgentArg re-executes the soak binary as a fake agent CLI (through a
// small wrapper script the daemon is pointed at), so the agents and crash
// phases need no real agent, account or network.
const fakeAgentArg = "__card_soak_fake_agent"

// hasMethod reports whether the daemon registers name (via rpc.discover).
func hasMethod(ctx context.Context, d *liveDaemon, name string) (bool, error) {
	c, err := d.dial(ctx)
	if err != nil {
		return false, err
	}
	defer c.Close()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var disc struct {
		Methods []struct {
			Name string `json:"name"`
		} `json:"methods"`
	}
	var raw json.RawMessage
	if err := c.Call(cctx, "rpc.discover", nil, &raw); err != nil {
		return false, err
	}
	_ = json.Unmarshal(raw, &disc)
	for _, m := range disc.Methods {
		if m.Name == name {
			return true, nil
		}
	}
	return false, nil
}

func invokeMissing(ctx context.Context, h *harness, r *result) bool {
	d, err := h.start(ctx, daemonSetup{config: soakConfig})
	if err != nil {
		r.fail("start daemon", err)
		return true
	}
	defer d.stop(15 * time.Second)
	ok, err := hasMethod(ctx, d, "agents.invoke")
	if err != nil {
		r.fail("rpc.discover", err)
		return true
	}
	if !ok {
		r.skip("agents.invoke is not registered in this build of card")
		return true
	}
	return false
}

func phaseAgents(ctx context.Context, h *harness) *result {
	r := &result{}
	if invokeMissing(ctx, h, r) {
		return r
	}
	return r.skip("not written yet")
}

func phaseCrash(ctx context.Context, h *harness) *result {
	r := &result{}
	if invokeMissing(ctx, h, r) {
		return r
	}
	return r.skip("not written yet")
}

func fakeAgent(args []string) int { return 2 }
