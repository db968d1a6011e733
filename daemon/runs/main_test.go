package runs

import (
	"testing"

	"go.uber.org/goleak"
)

// Runs start goroutines per run and per subscriber; none may outlive a test.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// modernc sqlite keeps a package-level worker; none of ours.
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"),
	)
}
