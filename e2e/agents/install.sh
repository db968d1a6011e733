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
# Two packages need their postinstall, so those run explicitly: Claude Code
# copies its native binary over a placeholder, and OpenCode's bin is a shell
# script that only says "postinstall script was not run" until its
# postinstall links the binary of the platform package npm already put
# beside it (opencode-linux-x64 here; it fetches from npm only when none of
# the platform packages holds a binary that answers --version).
set -euo pipefail
cd "$(dirname "$0")"
npm install --ignore-scripts --no-audit --no-fund --loglevel=error
(cd node_modules/@anthropic-ai/claude-code && node install.cjs)
(cd node_modules/opencode-ai && node postinstall.mjs)
node_modules/.bin/claude --version >/dev/null
node_modules/.bin/opencode --version >/dev/null
node_modules/.bin/qwen --version >/dev/null
echo "installed the real agent CLIs in $(pwd)/node_modules/.bin; run their tests with CARD_E2E=1 go test -race ./..."
