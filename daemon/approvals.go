package daemon

import (
	"context"
	"errors"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/runs"
	"github.com/card-dev/card/rpc"
	"github.com/card-dev/card/rpc/rpcclient"
)

// peerAsker puts a run's questions to one client connection.
type peerAsker struct{ p *rpc.Peer }

func (a peerAsker) ID() uint64            { return a.p.ID() }
func (a peerAsker) Done() <-chan struct{} { return a.p.Context().Done() }

func (a peerAsker) Ask(ctx context.Context, q api.ApproveParams) (api.ApproveAnswer, error) {
	var ans api.ApproveAnswer
	err := a.p.Call(ctx, api.ApproveMethod, q, &ans)
	var re *rpcclient.Error
	var denied *rpc.AccessDeniedError
	switch {
	case err == nil:
		return ans, nil
	case errors.Is(err, rpc.ErrPeerGone):
		return ans, runs.ErrAskerGone
	case errors.As(err, &denied):
		// Never asked (approverOf keeps such a connection out): no answer.
		return ans, &runs.DeclinedError{Code: CodeAccessDenied, Message: denied.Error()}
	case errors.As(err, &re):
		return ans, &runs.DeclinedError{Code: re.Code, Message: re.Message}
	}
	return ans, err
}

// askerOf is the connection a request came on, as an Asker; nil outside a
// connection.
func askerOf(ctx context.Context) runs.Asker {
	if p := rpc.PeerFrom(ctx); p != nil {
		return peerAsker{p}
	}
	return nil
}

// approverOf is peer as an Asker if it holds the approve class, else nil:
// allowing a tool call is running it, so a run's questions go only to
// connections granted that right, however they follow the run (starting
// it, or runs.subscribe, which is only read). One that is never asked has
// nothing to answer, and agents.approval_decide refuses it by its class.
func approverOf(peer *rpc.Peer) runs.Asker {
	if peer == nil || !peer.Grants().Has(rpc.AccessApprove) {
		return nil
	}
	return peerAsker{peer}
}

func (d *Daemon) registerApprovals() {
	r := d.registry
	rpc.ServerRequest[api.ApproveParams, api.ApproveAnswer](r, api.ApproveMethod, rpc.Doc{
		Access:  rpc.AccessApprove,
		Summary: "Server to client: may the agent of an ask-mode run make this tool call? Answer allow, allow_always or deny.",
		Description: "Sent only to connections granted the approve access class: to the connection that started the run; once that one is gone (or if it may not approve), to every such connection following the run " +
			"(runs.subscribe), including one that subscribes while the question waits. The first valid answer decides; the others' " +
			"requests are withdrawn with $/cancelRequest. allow_always allows this tool by name for the rest of the run. No answer by " +
			"expires_at (approval_timeout_secs), nobody to ask, or an error answer from every connection asked: denied. An answer " +
			"that is not one of the three decisions leaves the question open; agents.approval_decide gives the same answer with errors.",
	})
	rpc.Register(r, "agents.approval_decide", rpc.Doc{
		Access:  rpc.AccessApprove,
		Summary: "Answer a question of an ask-mode run (agents.approve) with a client request instead of a response.",
		Description: "For clients whose JSON-RPC library cannot answer a server's request, and the way to hear why an answer " +
			"was refused: an unknown request_id (-32017), a question already decided or a run already ended (-32018), a " +
			"connection the question was not sent to (-32019), a decision that is not allow, allow_always or deny (-32602). " +
			"A refused answer leaves the run as it was.",
		Errors: []int64{CodeRunNotFound, CodeApprovalNotFound, CodeApprovalClosed, CodeApprovalNotAsked},
	}, func(ctx context.Context, p api.DecideParams) (api.DecideResult, error) {
		conn := uint64(0)
		if a := askerOf(ctx); a != nil {
			conn = a.ID()
		}
		return d.runs.Decide(ctx, conn, p.RunID, p.RequestID, p.Decision, p.Message)
	})
}
