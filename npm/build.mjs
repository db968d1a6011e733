#!/usr/bin/env node
// Makes the npm packages of the card binary from goreleaser's output, the
// way esbuild and Biome ship theirs: one package per platform holding that
// platform's binary (its package.json's os and cpu make npm install it only
// there), and @card-dev/card, whose optionalDependencies name all four at
// the same version and whose `card` command runs the one npm installed.
//
//   goreleaser release --snapshot --clean   (or a release) writes dist/
//   node npm/build.mjs [--dist DIR] [--out DIR]
//
// The binaries are taken from the release archives, each checked against
// checksums.txt first, so what npm ships is byte for byte what the release
// ships. The version is the release's (dist/metadata.json). The packages are
// written to DIR/npm (default dist/npm), one directory each, ready for
// `npm pack` or `npm publish`.

import { createHash } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { chmodSync, copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const repoRoot = resolve(here, '..');

/** The platforms, as goreleaser names them and as npm's os and cpu do. */
export const platforms = [
  { goos: 'linux', goarch: 'amd64', os: 'linux', cpu: 'x64' },
  { goos: 'linux', goarch: 'arm64', os: 'linux', cpu: 'arm64' },
  { goos: 'darwin', goarch: 'amd64', os: 'darwin', cpu: 'x64' },
  { goos: 'darwin', goarch: 'arm64', os: 'darwin', cpu: 'arm64' },
];

export const mainName = '@card-dev/card';
/** @param {{os: string, cpu: string}} p */
export const platformName = (p) => `${mainName}-${p.os}-${p.cpu}`;

const common = {
  license: 'MIT',
  homepage: 'https://github.com/card-dev/card#readme',
  repository: { type: 'git', url: 'git+https://github.com/card-dev/card.git' },
  bugs: { url: 'https://github.com/card-dev/card/issues' },
};

/** @param {string} path */
const sha256 = (path) => createHash('sha256').update(readFileSync(path)).digest('hex');

/**
 * The archive of each platform, checked against checksums.txt.
 * @param {string} dist
 * @returns {{ version: string, archives: Map<string, string> }}
 */
export function releaseArchives(dist) {
  const meta = JSON.parse(readFileSync(join(dist, 'metadata.json'), 'utf8'));
  const version = String(meta.version ?? '');
  if (!/^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$/.test(version)) throw new Error(`${dist}/metadata.json: version ${JSON.stringify(version)} is not a semver npm takes`);
  const artifacts = JSON.parse(readFileSync(join(dist, 'artifacts.json'), 'utf8'));
  const sums = new Map();
  for (const line of readFileSync(join(dist, 'checksums.txt'), 'utf8').split('\n')) {
    const m = /^([0-9a-f]{64})\s+\*?(\S+)$/.exec(line.trim());
    if (m) sums.set(m[2], m[1]);
  }
  const archives = new Map();
  for (const p of platforms) {
    const a = artifacts.find((/** @type {any} */ x) => x.type === 'Archive' && x.goos === p.goos && x.goarch === p.goarch);
    if (!a) throw new Error(`${dist}/artifacts.json has no archive for ${p.goos}/${p.goarch}`);
    // By name in dist: the paths in artifacts.json are relative to where
    // goreleaser ran.
    const path = join(dist, a.name);
    const want = sums.get(a.name);
    if (!want) throw new Error(`${dist}/checksums.txt has no line for ${a.name}`);
    const got = sha256(path);
    if (got !== want) throw new Error(`${a.name}: sha256 ${got}, but checksums.txt says ${want}`);
    archives.set(`${p.goos}/${p.goarch}`, path);
  }
  return { version, archives };
}

/**
 * Writes the five package directories under out and returns them.
 * @param {{ dist?: string, out?: string }} [o]
 */
export function build(o = {}) {
  const dist = resolve(o.dist ?? join(repoRoot, 'dist'));
  const out = resolve(o.out ?? join(dist, 'npm'));
  const { version, archives } = releaseArchives(dist);
  rmSync(out, { recursive: true, force: true });
  mkdirSync(out, { recursive: true });
  const dirs = [];
  const tmp = mkdtempSync(join(tmpdir(), 'card-npm-'));
  try {
    for (const p of platforms) {
      const name = platformName(p);
      const dir = join(out, `card-${p.os}-${p.cpu}`);
      mkdirSync(join(dir, 'bin'), { recursive: true });
      const x = join(tmp, `${p.goos}-${p.goarch}`);
      mkdirSync(x);
      // tar is on every machine goreleaser builds on; the archive holds
      // card at its top.
      execFileSync('tar', ['-xzf', /** @type {string} */ (archives.get(`${p.goos}/${p.goarch}`)), '-C', x, 'card']);
      copyFileSync(join(x, 'card'), join(dir, 'bin', 'card'));
      chmodSync(join(dir, 'bin', 'card'), 0o755);
      writeJSON(join(dir, 'package.json'), {
        name,
        version,
        description: `The card binary for ${p.os === 'darwin' ? 'macOS' : 'Linux'} ${p.cpu}; install ${mainName}, which picks this one on that platform.`,
        ...common,
        os: [p.os],
        cpu: [p.cpu],
        files: ['bin/card'],
        // Yarn and pnpm run the binary from where it is installed, never
        // from a zip.
        preferUnplugged: true,
      });
      writeFileSync(join(dir, 'README.md'), `# ${name}\n\nThe \`card\` binary for ${p.os} ${p.cpu}. Install [\`${mainName}\`](https://www.npmjs.com/package/${mainName}) instead: it depends on this package (and its siblings for the other platforms) as an optional dependency, and its \`card\` command runs the binary npm installed for your platform.\n`);
      dirs.push(dir);
    }
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
  const dir = join(out, 'card');
  mkdirSync(join(dir, 'bin'), { recursive: true });
  copyFileSync(join(here, 'card', 'bin', 'card.js'), join(dir, 'bin', 'card.js'));
  chmodSync(join(dir, 'bin', 'card.js'), 0o755);
  copyFileSync(join(here, 'card', 'README.md'), join(dir, 'README.md'));
  writeJSON(join(dir, 'package.json'), {
    name: mainName,
    version,
    description: 'card: the coding-agent CLIs on this machine (Claude Code, Codex, Gemini CLI, Copilot, Droid, Pi) for desktop apps and editors, over one local WebSocket JSON-RPC API and ACP. The prebuilt binary; no Go needed.',
    ...common,
    keywords: ['acp', 'agent-client-protocol', 'claude-code', 'codex', 'gemini', 'coding-agent', 'daemon'],
    bin: { card: 'bin/card.js' },
    files: ['bin/card.js'],
    engines: { node: '>=18' },
    optionalDependencies: Object.fromEntries(platforms.map((p) => [platformName(p), version])),
  });
  dirs.unshift(dir);
  return { version, dirs };
}

/** @param {string} path @param {unknown} v */
function writeJSON(path, v) {
  writeFileSync(path, `${JSON.stringify(v, null, 2)}\n`);
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const args = process.argv.slice(2);
  const opt = (/** @type {string} */ name) => { const i = args.indexOf(name); return i >= 0 ? args[i + 1] : undefined; };
  try {
    const { version, dirs } = build({ dist: opt('--dist'), out: opt('--out') });
    console.log(`npm packages ${version}:`);
    for (const d of dirs) console.log(`  ${d}`);
  } catch (err) {
    console.error(`npm/build.mjs: ${err instanceof Error ? err.message : err}`);
    process.exit(1);
  }
}

