package rpc

import (
	"context"

	"github.com/card-dev/card/rpc/rpcclient"
)

// Dial connects to the daemon at url with token (rpcclient.Dial).
func Dial(ctx context.Context, url, token string, opts rpcclient.ClientOptions) (*rpcclient.Client, error) {
	return rpcclient.Dial(ctx, url, token, opts)
}
