#!/usr/bin/env node
// The `card` command of the npm package: it runs the card binary that came
// in this platform's package (@card-dev/card-linux-x64 and its siblings,
// optional dependencies npm installs only on the platform each names), with
// stdin, stdout and stderr handed over as they are (an editor speaks ACP to
// card through them), the signals a supervisor or an editor sends passed
// on, and card's exit code or signal as its own.
'use strict';

const { spawn } = require('node:child_process');
const { dirname, join } = require('node:path');
const { isatty } = require('node:tty');

const packages = {
  'linux x64': '@card-dev/card-linux-x64',
  'linux arm64': '@card-dev/card-linux-arm64',
  'darwin x64': '@card-dev/card-darwin-x64',
  'darwin arm64': '@card-dev/card-darwin-arm64',
};

function binary() {
  const pkg = packages[`${process.platform} ${process.arch}`];
  if (!pkg) {
    throw new Error(
      `no card build for ${process.platform}/${process.arch}: the npm package has linux and macOS on x64 and arm64; ` +
        'elsewhere build it with Go: go install github.com/card-dev/card/cmd/card@latest',
    );
  }
  try {
    return join(dirname(require.resolve(`${pkg}/package.json`)), 'bin', 'card');
  } catch {
    throw new Error(
      `${pkg} is not installed: npm installs it with @card-dev/card as an optional dependency for this platform; ` +
        'install again without --omit=optional (or --no-optional)',
    );
  }
}

let bin;
try {
  bin = binary();
} catch (err) {
  process.stderr.write(`card: ${err.message}\n`);
  process.exit(1);
}

const child = spawn(bin, process.argv.slice(2), { stdio: 'inherit' });

// A terminal sends Ctrl-C (SIGINT) and Ctrl-\ (SIGQUIT) to its whole
// foreground process group, card included, so on a terminal passing them on
// would make one Ctrl-C two (and `card chat` ends on a second one). Every
// other sender (an editor, a supervisor, npm forwarding its own) signals
// this process alone, so those are passed on. (isatty, not
// process.stdin: making that stream would switch the descriptor card reads
// to non-blocking.)
const fromTerminal = new Set(isatty(0) ? ['SIGINT', 'SIGQUIT'] : []);
const forwarded = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGQUIT'];
const handlers = {};
for (const sig of forwarded) {
  handlers[sig] = () => {
    if (!fromTerminal.has(sig) && child.exitCode === null && child.signalCode === null) child.kill(sig);
  };
  process.on(sig, handlers[sig]);
}

child.on('error', (err) => {
  process.stderr.write(`card: could not run ${bin}: ${err.message}\n`);
  process.exit(1);
});

child.on('exit', (code, signal) => {
  if (signal) {
    // Ended by a signal: end the same way, so whoever started this sees
    // what card's own parent would (a shell's 130 for SIGINT, and so on).
    for (const sig of forwarded) process.removeListener(sig, handlers[sig]);
    process.kill(process.pid, signal);
    return;
  }
  process.exit(code ?? 1);
});
