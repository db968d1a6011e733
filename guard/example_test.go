package guard_test

import (
	"fmt"
	"os"

	"github.com/card-dev/card/guard"
)

// The daemon's use: read the environment once at startup, then judge each
// request by the caller's own id and stamp an allowed child.
func ExampleSnapshot_Check() {
	snap := guard.Snapshot{Ancestry: guard.ParseAncestry("claude-code"), MaxChain: guard.DefaultMaxChain}

	if refusal, _ := snap.Check("claude-code", "gemini"); refusal != nil {
		fmt.Println(refusal.Reason)
	}
	refusal, seeded := snap.Check("codex", "gemini")
	fmt.Println(refusal == nil, guard.Format(guard.Child(seeded, "codex")))

	env := guard.StampEnv(os.Environ(), guard.Child(seeded, "codex"))
	fmt.Println(env[len(env)-1])
	// Output:
	// cycle
	// true claude-code,gemini,codex
	// CAR_INVOKED_BY=claude-code,gemini,codex
}
