package agentside

import (
	"encoding/json"
	"errors"

	"github.com/card-dev/card/rpc/rpcclient"
)

// rpcError unpacks a daemon's JSON-RPC error answer.
func rpcError(err error) (code int64, msg string, data json.RawMessage, ok bool) {
	var re *rpcclient.Error
	if !errors.As(err, &re) {
		return 0, "", nil, false
	}
	if re.Data != nil {
		data, _ = json.Marshal(re.Data)
	}
	return re.Code, re.Message, data, true
}
