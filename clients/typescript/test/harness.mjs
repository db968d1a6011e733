// Test harness: builds card (and the asking Claude stand-in) once, starts
// real `card serve` processes on random loopback ports in temp homes, and
// cleans up after each test.
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { serve } from '../scripts/gen.mjs';

const here = dirname(fileURLToPath(import.meta.url));
export const packageDir = resolve(here, '..');
export const repoRoot = resolve(packageDir, '..', '..');
/** The stand-in Claude Code of the docs tests: a shell script; SLOW sleeps 30 s, TOOL calls Read. */
export const scriptClaude = join(repoRoot, 'docs', 'testdata', 'fake-claude.sh');

/**
 * Builds card and the asking stand-in into dir (CARD_TEST_BIN_DIR when
 * test/run.mjs built them already for every test file).
 */
export function binaries() {
  let dir = process.env.CARD_TEST_BIN_DIR;
  if (!dir) {
    dir = mkdtempSync(join(tmpdir(), 'card-ts-bin-'));
    process.on('exit', () => rmSync(dir, { recursive: true, force: true }));
  }
  const card = join(dir, 'card');
  const asking = join(dir, 'claude');
  if (!existsSync(card)) execFileSync('go', ['build', '-o', card, './cmd/card'], { cwd: repoRoot, stdio: 'inherit' });
  if (!existsSync(asking)) execFileSync('go', ['build', '-o', asking, './clients/typescript/test/fakeclaude'], { cwd: repoRoot, stdio: 'inherit' });
  return { dir, card, asking };
}

// Every daemon a test started is killed when this process ends, also when
// the runner ends it (a test that timed out runs no after hooks), so no
// card serve outlives the tests.
const daemons = new Set();
const killAll = () => { for (const c of daemons) { try { c.kill('SIGKILL'); } catch { /* gone */ } } };
process.on('exit', killAll);
for (const sig of ['SIGTERM', 'SIGINT']) process.on(sig, () => { killAll(); process.exit(128 + (sig === 'SIGTERM' ? 15 : 2)); });

/** A private temp directory removed after the test. */
export function tempDir(t, name = 'card-ts-') {
  const d = mkdtempSync(join(tmpdir(), name));
  t.after(() => rmSync(d, { recursive: true, force: true, maxRetries: 10, retryDelay: 50 }));
  return d;
}

/**
 * Starts card serve for the test with Claude Code pinned to agent (default
 * the script stand-in), login_shell_path off so the machine's own CLIs stay
 * out, and stops it after the test.
 * @param {import('node:test').TestContext} t
 * @param {{ agent?: string, home?: string, config?: string }} [o]
 */
export async function startDaemon(t, o = {}) {
  const { card } = binaries();
  // Its own directory, removed only once the daemon (and any restart of
  // it) has stopped writing there: hooks run in the order they were added.
  const dir = mkdtempSync(join(tmpdir(), 'card-ts-'));
  const home = o.home ?? join(dir, 'home');
  const stops = [];
  t.after(async () => {
    for (const stop of stops) await stop();
    rmSync(dir, { recursive: true, force: true, maxRetries: 10, retryDelay: 50 });
  });
  mkdirSync(home, { recursive: true, mode: 0o700 });
  const env = {
    PATH: '/usr/bin:/bin',
    HOME: home,
    CAR_CLAUDE_CODE_BIN: o.agent ?? scriptClaude,
    ANTHROPIC_API_KEY: 'sk-ant-test-not-a-key',
  };
  // The script stand-in speaks only Claude's one-shot stream, so sessions
  // run every turn as its own process (max_warm = 0), as a real CLI's cold
  // turn would.
  let config = o.config ?? 'login_shell_path = false\n';
  if (!config.includes('[sessions]')) config += '\n[sessions]\nmax_warm = 0\n';
  const d = await serve(card, { home, env, config });
  daemons.add(d.child);
  stops.push(() => d.stop('SIGKILL'));
  const restart = async () => {
    const again = await serve(card, { home, env });
    daemons.add(again.child);
    stops.push(() => again.stop('SIGKILL'));
    return again;
  };
  return { ...d, env, card, restart };
}

/**
 * Starts `card serve --fake-agents` for the test, as an app's own tests
 * would: a temp home, login_shell_path off and a bare PATH, so the agents
 * it serves are card's fake ones (`fake`, `fake-2`) and no agent CLI of the
 * machine. Stopped after the test; restart brings it up again on the same
 * home, where the fake agents keep their sessions.
 * @param {import('node:test').TestContext} t
 */
export async function startFakeAgents(t) {
  const { card } = binaries();
  const dir = mkdtempSync(join(tmpdir(), 'card-ts-fake-'));
  const home = join(dir, 'home');
  const stops = [];
  t.after(async () => {
    for (const stop of stops) await stop();
    rmSync(dir, { recursive: true, force: true, maxRetries: 10, retryDelay: 50 });
  });
  mkdirSync(home, { recursive: true, mode: 0o700 });
  const env = { PATH: '/usr/bin:/bin', HOME: home };
  const args = ['--fake-agents'];
  const d = await serve(card, { home, env, args, config: 'login_shell_path = false\n' });
  daemons.add(d.child);
  stops.push(() => d.stop());
  const restart = async () => {
    const again = await serve(card, { home, env, args });
    daemons.add(again.child);
    stops.push(() => again.stop());
    return again;
  };
  return { ...d, env, card, restart };
}

/** Runs fn with CARD_HOME set to home, restoring it after. */
export async function withHome(home, fn) {
  const prev = process.env.CARD_HOME;
  process.env.CARD_HOME = home;
  try { return await fn(); } finally { if (prev === undefined) delete process.env.CARD_HOME; else process.env.CARD_HOME = prev; }
}

export function discovery(home) { return JSON.parse(readFileSync(join(home, 'daemon.json'), 'utf8')); }
export function writePrivate(path, text) { writeFileSync(path, text, { mode: 0o600 }); }
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
export { spawn };
