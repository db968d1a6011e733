// Command fakeclaude is the Claude Code stand-in of package fakeclaude as a
// program of its own, for the TypeScript client's tests: they run card as a
// real process and need an agent that asks card's permission tool exactly as
// Claude Code does, which a Go test binary's TestMain cannot be for them.
package main

import (
	"os"

	"github.com/card-dev/card/internal/fakeclaude"
)

func main() { os.Exit(fakeclaude.Main()) }
