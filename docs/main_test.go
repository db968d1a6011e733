package docs

import (
	"testing"

	"go.uber.org/goleak"
)

// The doc tests start real daemons; none may leave a goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
