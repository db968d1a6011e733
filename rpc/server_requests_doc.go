package rpc

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/card-dev/card/rpc/rpcclient"
)

// ServerRequestInfo documents a request the server sends a client, whose
// params are Params and whose answer the client must shape as Result.
type ServerRequestInfo struct {
	Name   string
	Doc    Doc
	Params reflect.Type
	Result reflect.Type
}

// ServerRequest documents a request the server sends with params P, which a
// client answers with a result R. Like a method, it cannot be documented
// without a summary or an access class, or twice. The class is what a
// connection must hold to be sent the request (Peer.Call refuses to send it
// elsewhere): the answer to a question can be a right in itself, and a
// connection never asked has no answer that counts.
func ServerRequest[P, R any](r *Registry, name string, doc Doc) {
	if strings.TrimSpace(doc.Summary) == "" {
		panic(fmt.Sprintf("rpc: server request %q registered without a summary", name))
	}
	if !doc.Access.Valid() {
		panic(fmt.Sprintf("rpc: server request %q registered without an access class (Doc.Access %q; one of %s)", name, doc.Access, joinClasses(AccessClasses)))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, have := range r.serverRequests {
		if have.Name == name {
			panic(fmt.Sprintf("rpc: server request %q registered twice", name))
		}
	}
	r.serverRequests = append(r.serverRequests, ServerRequestInfo{Name: name, Doc: doc, Params: reflect.TypeFor[P](), Result: reflect.TypeFor[R]()})
}

// serverRequestAccess is the class a documented server request needs.
func (r *Registry) serverRequestAccess(name string) (Access, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, q := range r.serverRequests {
		if q.Name == name {
			return q.Doc.Access, true
		}
	}
	return "", false
}

// ServerRequests lists the documented server-to-client requests.
func (r *Registry) ServerRequests() []ServerRequestInfo {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return append([]ServerRequestInfo(nil), r.serverRequests...)
}

// serverRequestsDoc describes the server's requests for rpc.discover. The
// params are open (the server writes them and may add fields); the result
// is closed, like a method's params, since the client writes it.
func (sb *schemaBuilder) serverRequestsDoc(list []ServerRequestInfo) ([]rpcclient.OpenRPCServerRequest, error) {
	var out []rpcclient.OpenRPCServerRequest
	for _, q := range list {
		params, err := sb.params(q.Params, true)
		if err != nil {
			return nil, fmt.Errorf("rpc.discover: params of server request %s: %w", q.Name, err)
		}
		result, err := sb.reflect(sb.strict, q.Result)
		if err != nil {
			return nil, fmt.Errorf("rpc.discover: result of server request %s: %w", q.Name, err)
		}
		out = append(out, rpcclient.OpenRPCServerRequest{
			Name: q.Name, Summary: q.Doc.Summary, Description: q.Doc.Description,
			ParamStructure: "by-name", Params: params, Result: rpcclient.ContentDescriptor{Name: "result", Schema: result},
			Access: string(q.Doc.Access),
		})
	}
	return out, nil
}
