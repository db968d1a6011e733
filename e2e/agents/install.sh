#!/usr/bin/env bash
# Installs the real agent CLIs the end-to-end tests drive into
# e2e/agents/node_modules, the way CI does (.ci/run calls this script).
#
# `npm install`, not `npm ci`: @factory/cli 0.225.1 lists platform packages
# at a version that was never published, which `npm ci`'s lock check refuses
# ("Missing: @factory/cli-darwin-arm64 from lock file"); `npm install`
# follows the committed lock and leaves it unchanged.
# --ignore-scripts: no package's install script runs, and @factory/cli's
# postinstall would otherwise replace its JS launcher with the platform
# binary, leaving no launcher for the missing-binary tests.
# Claude Code is the one package that needs its postinstall: it copies the
# native binary over a placeholder, so that one runs explicitly.
set -euo pipefail
cd "$(dirname "$0")"
npm install --ignore-scripts --no-audit --no-fund --loglevel=error
(cd node_modules/@anthropic-ai/claude-code && node install.cjs)
node_modules/.bin/claude --version >/dev/null
echo "installed the real agent CLIs in $(pwd)/node_modules/.bin; run their tests with CARD_E2E=1 go test -race ./..."
