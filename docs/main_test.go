package docs

import (
	"testing"

	"github.com/card-dev/card/daemon/daemontest"
)

// The doc tests start real daemons; none may leave a goroutine behind.
func TestMain(m *testing.M) { daemontest.VerifyTestMain(m) }
