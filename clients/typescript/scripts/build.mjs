#!/usr/bin/env node
// Builds the package twice from src: dist/esm, ES modules for `import`,
// and dist/cjs, CommonJS for `require` (an Electron app's main process
// that is CommonJS, and Node before require() of ES modules), each with
// its own declarations, as package.json's exports conditions name them.
//
// TypeScript's nodenext mode emits each file in the format its nearest
// package.json says, so the CommonJS build compiles a copy of src under a
// package.json of "type": "commonjs", and dist/cjs gets the same file, so
// Node and TypeScript read its .js and .d.ts as CommonJS.

import { execFileSync } from 'node:child_process';
import { cpSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const pkg = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const tsc = join(pkg, 'node_modules', 'typescript', 'bin', 'tsc');
const run = (/** @type {string[]} */ args) => execFileSync(process.execPath, [tsc, ...args], { cwd: pkg, stdio: 'inherit' });
const commonjs = `${JSON.stringify({ type: 'commonjs' })}\n`;

rmSync(join(pkg, 'dist'), { recursive: true, force: true });
run(['-p', 'tsconfig.build.json']);

const staging = join(pkg, '.cjs-build');
rmSync(staging, { recursive: true, force: true });
try {
  cpSync(join(pkg, 'src'), join(staging, 'src'), { recursive: true });
  writeFileSync(join(staging, 'package.json'), commonjs);
  run(['-p', 'tsconfig.cjs.json']);
} finally {
  rmSync(staging, { recursive: true, force: true });
}
mkdirSync(join(pkg, 'dist', 'cjs'), { recursive: true });
writeFileSync(join(pkg, 'dist', 'cjs', 'package.json'), commonjs);
