package rpc

import (
	"context"

	"github.com/card-dev/card/rpc/rpcclient"
)

// The low-level client is package rpcclient, which programs that only
// connect import without the server; these aliases keep rpc's names for
// the tests and tools that use both.
type (
	Client        = rpcclient.Client
	ClientOptions = rpcclient.ClientOptions
	DialError     = rpcclient.DialError
)

// Dial connects to the daemon at url with token (rpcclient.Dial).
func Dial(ctx context.Context, url, token string, opts ClientOptions) (*Client, error) {
	return rpcclient.Dial(ctx, url, token, opts)
}
