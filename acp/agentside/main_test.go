package agentside

import (
	"testing"

	"go.uber.org/goleak"
)

// The server starts goroutines per connection and per session (the pump,
// the questions put to the editor); none outlives the test that started
// it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
