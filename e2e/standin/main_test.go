package standin

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/card-dev/card/internal/testskip"
)

// The stand-ins run HTTP servers and the tests run child processes with
// output-copying goroutines; none may outlive the suite.
func TestMain(m *testing.M) { goleak.VerifyTestMain(testskip.Wrap(m)) }
