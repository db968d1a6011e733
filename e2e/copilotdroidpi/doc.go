// Package copilotdroidpi holds the end-to-end tests against the real
// GitHub Copilot CLI, Factory Droid and Pi installed by e2e/agents/install.sh
// in e2e/agents: detection and versions, health in an empty HOME, the Droid
// launcher without its platform binary, `agents.detect` listing all six
// adapters, and one invoke of each through a real `card serve` pointed at a
// loopback vendor-API stand-in (e2e/standin).
//
// Like every real-CLI test here they run only with CARD_E2E=1 or
// CARD_E2E_REQUIRED=1; a missing CLI skips loudly, or fails when required:
//
//	CARD_E2E=1 go test -race -count=1 ./e2e/copilotdroidpi/
package copilotdroidpi
