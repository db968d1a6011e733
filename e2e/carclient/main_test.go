// Package carclient_test is a CAR host, written from CAR's published daemon
// protocol (websocket-protocol.md and host-protocol.md) and nothing of
// card's, pointed at card: the one change such a host makes is its URL and
// the token on the upgrade. Every CAR-documented behaviour of the external
// agents methods is asserted as CAR states it, except the differences
// docs/protocol.md's CAR table lists, each asserted as that table states
// it. The agents are fakes replaying real captured streams, so it runs in
// every `go test ./...`.
package carclient_test

import (
	"testing"

	"github.com/card-dev/card/daemon/daemontest"
)

func TestMain(m *testing.M) { daemontest.VerifyTestMain(m) }
