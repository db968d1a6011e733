package daemon

import "github.com/card-dev/card/rpc"

// setupDiscover registers rpc.discover. It runs last in setup, but the
// document is built per call from the registry, so it also describes
// methods registered after it.
func (d *Daemon) setupDiscover() error {
	d.registry.DescribeParams(paramDocs)
	rpc.RegisterDiscover(d.registry, func() rpc.ServiceInfo {
		return rpc.ServiceInfo{
			Title:           "card",
			Version:         Version,
			ProtocolVersion: ProtocolVersion,
			Description:     "Run the coding-agent CLIs installed on this machine over one localhost WebSocket JSON-RPC 2.0 API. docs/protocol.md is the prose version of this document.",
			URL:             d.url,
		}
	})
	return nil
}

// Registry is the daemon's method registry. The protocol-doc test decodes
// docs/protocol.md's examples into the exact Go types registered here, so
// the prose cannot drift from the code.
func (d *Daemon) Registry() *rpc.Registry { return d.registry }
