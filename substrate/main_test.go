package substrate_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/card-dev/card/substrate"
	"github.com/card-dev/card/substrate/internal/bridgetest"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"
)

// bridgeEnv, when set, makes this test binary serve the test bridge on
// stdio instead of running tests: the stdio tests re-exec themselves as a
// real subprocess bridge.
const bridgeEnv = "CARD_SUBSTRATE_TEST_BRIDGE"

// dieEnv makes the subprocess bridge exit without answering its N-th call,
// as a crashed bridge would.
const dieEnv = "CARD_SUBSTRATE_TEST_BRIDGE_DIE_ON_CALL"

func TestMain(m *testing.M) {
	if os.Getenv(bridgeEnv) == "1" {
		os.Exit(serveStdioBridge())
	}
	goleak.VerifyTestMain(m)
}

func serveStdioBridge() int {
	local := substrate.NewLocal(startupEnv())
	defer local.Close()
	b := bridgetest.New(local)
	if n, err := strconv.Atoi(os.Getenv(dieEnv)); err == nil {
		b.BeforeCall = func(call int, _ string) {
			if call == n {
				os.Exit(7)
			}
		}
	}
	if err := b.Server.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "test bridge:", err)
		return 1
	}
	return 0
}
