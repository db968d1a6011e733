package main

import (
	"testing"

	"github.com/card-dev/card/daemon/daemontest"
)

// The commands start daemons, clients and followers; none may outlive the
// tests.
func TestMain(m *testing.M) { daemontest.VerifyTestMain(m) }
