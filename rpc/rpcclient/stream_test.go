package rpcclient

import (
	"encoding/json"
	"testing"

	"github.com/sourcegraph/jsonrpc2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestOnlyANotificationOfTheDaemonsOwnFormSkipsJSONRPC2(t *testing.T) {
	cases := []struct {
		name, frame string
		taken       bool
	}{
		{"a session event as the daemon writes it", `{"jsonrpc":"2.0","method":"sessions.event","params":{"seq":1,"event":{"text":"a \"quoted\" }{ brace"}}}`, true},
		{"params that are an array", `{"jsonrpc":"2.0","method":"m","params":[1,{"a":"}"}]}`, true},
		{"a member after params", `{"jsonrpc":"2.0","method":"m","params":{"a":1},"id":7}`, false},
		{"a server's request (it has an id)", `{"jsonrpc":"2.0","method":"agents.approve","params":{"a":1},"id":"x"}`, false},
		{"the cancel notification, which withdraws a request", `{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":3}}`, false},
		{"a method name with an escape", `{"jsonrpc":"2.0","method":"a\"b","params":{}}`, false},
		{"a response", `{"jsonrpc":"2.0","id":1,"result":{"ok":true}}`, false},
		{"the same notification written with spaces", `{"jsonrpc": "2.0", "method": "m", "params": {}}`, false},
		{"params cut short", `{"jsonrpc":"2.0","method":"m","params":{"a":}`, false},
		{"no params", `{"jsonrpc":"2.0","method":"m"}`, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			method, params, ok := notification([]byte(tc.frame))
			require.Equal(t, tc.taken, ok)
			if !ok {
				return
			}
			// What jsonrpc2 would have handed the handler.
			var req jsonrpc2.Request
			require.NoError(t, json.Unmarshal([]byte(tc.frame), &req))
			assert.True(t, req.Notif)
			assert.Equal(t, req.Method, method)
			assert.JSONEq(t, string(*req.Params), string(params))
		})
	}
}
