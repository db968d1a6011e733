#!/usr/bin/env node
// Writes src/generated.ts from the daemon's own description of its API,
// the OpenRPC document rpc.discover answers with. The types are generated,
// not written by hand, so a field the daemon adds or renames shows up as a
// compile error in the apps that use it instead of as undefined at run time;
// test/schema.test.mjs fails when the committed file and a freshly built
// daemon disagree.
//
//   npm run gen                      build card from this repository, ask it, write the file
//   npm run gen -- --card PATH       use that card binary instead of building one
//   npm run gen -- --from FILE       read a saved rpc.discover result (JSON) instead
//   npm run gen -- --check           write nothing; exit 1 when the file is out of date
//
// Only what is stable goes into the file: not the daemon's version or
// address, so regenerating against another build of the same protocol
// changes nothing.

import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync, rmSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import WebSocket from 'ws';

const here = dirname(fileURLToPath(import.meta.url));
export const packageDir = resolve(here, '..');
export const repoRoot = resolve(packageDir, '..', '..');
export const generatedPath = join(packageDir, 'src', 'generated.ts');

/** @param {string} s */
const pascal = (s) => s.split(/[._\-/]/).filter(Boolean).map((w) => w.charAt(0).toUpperCase() + w.slice(1)).join('');
/** @param {string} s */
const camel = (s) => { const p = pascal(s); return p.charAt(0).toLowerCase() + p.slice(1); };
/** @param {string} s */
const quote = (s) => JSON.stringify(s);
/** @param {string} name */
const key = (name) => (/^[A-Za-z_$][\w$]*$/.test(name) ? name : quote(name));

/**
 * A doc comment, with the text kept off `*\/`.
 * @param {string | undefined} text
 * @param {string} indent
 */
function doc(text, indent = '') {
  if (!text) return '';
  const lines = wrap(text.replaceAll('*/', '*\u2215'), 96 - indent.length);
  return `${indent}/**\n${lines.map((l) => `${indent} * ${l}`.trimEnd()).join('\n')}\n${indent} */\n`;
}

/** @param {string} text @param {number} width */
function wrap(text, width) {
  const out = [];
  for (const para of text.split('\n')) {
    let line = '';
    for (const word of para.split(/\s+/).filter(Boolean)) {
      if (line && line.length + 1 + word.length > width) { out.push(line); line = word; } else line = line ? `${line} ${word}` : word;
    }
    out.push(line);
  }
  return out;
}

/**
 * The TypeScript type of a JSON Schema, references by name.
 * @param {any} s
 * @param {string} indent
 * @returns {string}
 */
function tsType(s, indent = '') {
  if (s === true || s === undefined || s === null) return 'unknown';
  if (typeof s !== 'object') throw new Error(`gen: schema ${JSON.stringify(s)} is not an object`);
  if (s.$ref) {
    const name = String(s.$ref).replace('#/components/schemas/', '');
    if (name === s.$ref) throw new Error(`gen: reference ${s.$ref} points outside components.schemas`);
    return name;
  }
  if (s.oneOf || s.anyOf) return (s.oneOf ?? s.anyOf).map((/** @type {any} */ x) => tsType(x, indent)).join(' | ');
  if (s.enum) return s.enum.map((/** @type {unknown} */ v) => JSON.stringify(v)).join(' | ');
  // An open enum (x-enum on a string): today's values, and room for one a
  // later daemon adds under the same major version. (string & {}) keeps the
  // values offered by the editor, where a bare string would swallow them.
  if (Array.isArray(s['x-enum']) && s.type === 'string') return [...s['x-enum'].map((/** @type {unknown} */ v) => JSON.stringify(v)), '(string & {})'].join(' | ');
  const types = Array.isArray(s.type) ? s.type : s.type ? [s.type] : [];
  if (types.length === 0) return s.properties ? objectType(s, indent) : 'unknown';
  return types.map((/** @type {string} */ t) => {
    switch (t) {
      case 'string': return 'string';
      case 'integer': case 'number': return 'number';
      case 'boolean': return 'boolean';
      case 'null': return 'null';
      case 'array': { const e = tsType(s.items, indent); return /[|&]/.test(e) ? `Array<${e}>` : `${e}[]`; }
      case 'object': return objectType(s, indent);
      default: throw new Error(`gen: unknown schema type ${t}`);
    }
  }).join(' | ');
}

/** @param {any} s @param {string} indent */
function objectType(s, indent) {
  const props = s.properties ?? {};
  const names = Object.keys(props);
  if (names.length === 0) {
    if (s.additionalProperties && s.additionalProperties !== true) return `Record<string, ${tsType(s.additionalProperties, indent)}>`;
    return 'Record<string, unknown>';
  }
  const req = new Set(s.required ?? []);
  const inner = indent + '  ';
  const fields = names.map((n) => `${doc(props[n].description, inner)}${inner}${key(n)}${req.has(n) ? '' : '?'}: ${tsType(props[n], inner)};`);
  return `{\n${fields.join('\n')}\n${indent}}`;
}

/**
 * An interface (or a type alias, for a schema that is not an object with
 * fields) named name.
 * @param {string} name @param {any} s
 */
function declare(name, s) {
  const head = doc(s?.description);
  if (s && typeof s === 'object' && !s.$ref && !s.oneOf && (s.type === 'object' || (!s.type && s.properties)) && s.properties && Object.keys(s.properties).length) {
    return `${head}export interface ${name} ${objectType(s, '')}\n`;
  }
  return `${head}export type ${name} = ${tsType(s)};\n`;
}

/**
 * By-name content descriptors as one object schema.
 * @param {any[]} params
 */
function paramsSchema(params) {
  /** @type {any} */
  const s = { type: 'object', properties: {}, required: [] };
  for (const p of params) {
    s.properties[p.name] = { ...(typeof p.schema === 'object' ? p.schema : {}), description: p.description || p.schema?.description };
    if (p.schema === true) s.properties[p.name] = true;
    if (p.required) s.required.push(p.name);
  }
  return s;
}

/**
 * The discriminated union of a schema whose kind property lists its values
 * in x-enum and whose other properties name the kinds that carry them in
 * x-kinds: one member per kind with the fields of that kind.
 * @param {string} base the schema's name
 * @param {any} s
 * @param {Record<string, string>} [docs] descriptions of its fields by name
 * @returns {{ text: string, kinds: string[] } | null}
 */
function kindUnion(base, s, docs = {}) {
  const kinds = s?.properties?.kind?.['x-enum'];
  // A union only where fields say which kinds carry them: a kind that is
  // just an open list of values (a run error's) is a field like any other.
  if (!Array.isArray(kinds) || !Object.values(s.properties).some((/** @type {any} */ p) => p?.['x-kinds'])) return null;
  // The fields' descriptions, where the schema has none, from the
  // notification that carries this type (agents.event's params).
  /** @type {Record<string, any>} */
  const props = {};
  for (const [n, p] of Object.entries(s.properties)) props[n] = /** @type {any} */ (p).description || !docs[n] ? p : { ...(/** @type {any} */ (p)), description: docs[n] };
  const req = new Set(s.required ?? []);
  const common = Object.keys(props).filter((n) => n !== 'kind' && !props[n]['x-kinds']);
  // Only what every event has may go without x-kinds: an optional field
  // without it is one someone added without saying which kinds carry it,
  // and putting it on every kind would be a lie.
  for (const n of common) {
    if (!req.has(n)) throw new Error(`gen: ${base}.${n} is optional but names no kinds (x-kinds): tag its Go field with jsonschema_extras:"x-kinds=<kind>,…" in package api (and add a new kind to kind's x-enum)`);
  }
  /** @param {any} p */
  const kindsOf = (p) => (Array.isArray(p['x-kinds']) ? p['x-kinds'] : [p['x-kinds']]);
  for (const n of Object.keys(props)) {
    if (n === 'kind' || !props[n]['x-kinds']) continue;
    for (const k of kindsOf(props[n])) if (!kinds.includes(k)) throw new Error(`gen: ${base}.${n} names kind ${k}, which kind's x-enum does not list`);
  }
  let text = doc(`The fields every ${base} has, whatever its kind.`) + `export interface ${base}Base {\n`;
  for (const n of common) text += `${doc(props[n].description, '  ')}  ${key(n)}${req.has(n) ? '' : '?'}: ${tsType(props[n], '  ')};\n`;
  text += '}\n\n';
  const members = [];
  for (const k of kinds) {
    const name = `${base}${pascal(k)}`;
    members.push(name);
    text += doc(`${/^[AEIOU]/.test(base) ? 'An' : 'A'} ${base} of kind ${k}.`) + `export interface ${name} extends ${base}Base {\n  kind: ${quote(k)};\n`;
    for (const n of Object.keys(props)) {
      if (n === 'kind' || !props[n]['x-kinds'] || !kindsOf(props[n]).includes(k)) continue;
      text += `${doc(props[n].description, '  ')}  ${key(n)}${req.has(n) ? '' : '?'}: ${tsType(props[n], '  ')};\n`;
    }
    text += '}\n\n';
  }
  text += doc(`Every kind of ${base}: switch on kind to narrow. The daemon may send a kind this list does not have yet (ignore it).`);
  text += `export type ${base} =\n${members.map((m) => `  | ${m}`).join('\n')};\n\n`;
  text += `/** The kinds of ${base}, in the daemon's order. */\nexport const ${camel(base)}Kinds = [${kinds.map(quote).join(', ')}] as const;\n`;
  text += `export type ${base}Kind = (typeof ${camel(base)}Kinds)[number];\n`;
  return { text, kinds };
}

/**
 * The whole of src/generated.ts for an rpc.discover document.
 * @param {any} d
 * @returns {string}
 */
export function generate(d) {
  const schemas = d.components?.schemas ?? {};
  const out = [];
  out.push(`// Code generated by scripts/gen.mjs from the daemon's rpc.discover document. DO NOT EDIT.
// Regenerate with \`npm run gen\`; test/schema.test.mjs fails when this file and the daemon differ.

/* eslint-disable */
`);
  out.push(`/** The protocol version the types were generated from (daemon.info's protocol_version). */
export const protocolVersion = ${quote(d.info?.['x-protocol-version'] ?? '')};
`);

  // Schemas, by name.
  const unions = new Map();
  /** @type {Record<string, Record<string, string>>} */
  const fieldDocs = {};
  for (const n of d['x-notifications'] ?? []) {
    const ps = paramsSchema(n.params ?? []);
    const same = Object.keys(schemas).find((name) => sameFields(schemas[name], ps));
    if (same) fieldDocs[same] = Object.fromEntries((n.params ?? []).filter((/** @type {any} */ p) => p.description).map((/** @type {any} */ p) => [p.name, p.description]));
  }
  for (const name of Object.keys(schemas).sort()) {
    const u = kindUnion(name, schemas[name], fieldDocs[name]);
    if (u) { unions.set(name, u); out.push(u.text); continue; }
    out.push(declare(name, schemas[name]));
  }

  // Methods.
  const methods = [...(d.methods ?? [])].sort((a, b) => a.name.localeCompare(b.name));
  const taken = new Set(Object.keys(schemas));
  /** @type {Array<{name:string, params:string, result:string, optional:boolean, m:any}>} */
  const rows = [];
  for (const m of methods) {
    const ps = paramsSchema(m.params ?? []);
    let pname = `${pascal(m.name)}Params`;
    const rname = `${pascal(m.name)}Result`;
    const rtype = tsType(m.result?.schema);
    // A params or result type the schemas already name under the same name
    // is used as it is.
    if (taken.has(pname) && !sameFields(schemas[pname], ps)) throw new Error(`gen: ${m.name} would declare ${pname}, which a schema of other fields already names`);
    if (taken.has(rname) && rtype !== rname) throw new Error(`gen: ${m.name} would declare ${rname}, which a schema already names`);
    if (!schemas[pname]) {
      out.push(doc(`Params of ${m.name}.`) + (Object.keys(ps.properties).length
        ? `export interface ${pname} ${objectType(ps, '')}\n`
        : `export type ${pname} = Record<string, never>;\n`));
    }
    if (!schemas[rname]) out.push(doc(`Result of ${m.name}.`) + `export type ${rname} = ${rtype};\n`);
    taken.add(pname); taken.add(rname);
    rows.push({ name: m.name, params: pname, result: rname, optional: ps.required.length === 0, m });
  }
  const errorNames = new Map();
  for (const [name, e] of Object.entries(d.components?.errors ?? {})) errorNames.set(`#/components/errors/${name}`, name);

  out.push(`/** Every method: its params, its result, the access class it needs and the error names it may answer with. */
export interface Methods {
${rows.map((r) => `  ${quote(r.name)}: { params: ${r.params}; result: ${r.result}; access: ${quote(r.m['x-access'] ?? '')}; errors: ${(r.m.errors ?? []).map((/** @type {any} */ e) => quote(errorNames.get(e.$ref) ?? e.$ref)).join(' | ') || 'never'} };`).join('\n')}
}
export type MethodName = keyof Methods;

/** Each method's access class, as rpc.discover says. */
export const methodAccess: { readonly [M in MethodName]: Methods[M]['access'] } = {
${rows.map((r) => `  ${quote(r.name)}: ${quote(r.m['x-access'] ?? '')},`).join('\n')}
};
`);

  // One function per method, for the client to extend.
  out.push(`/** How one call is made. */
export interface CallOptions {
  /** Aborting withdraws the request (\`$/cancelRequest\`); the call rejects with the signal's reason. */
  signal?: AbortSignal;
}

/** Every method of the daemon as one typed function; the client supplies how a call is sent. */
export abstract class MethodsBase {
  /** Sends one request and resolves with its result; a JSON-RPC error answer rejects with a CardError. */
  abstract call<M extends MethodName>(method: M, params?: Methods[M]['params'], opts?: CallOptions): Promise<Methods[M]['result']>;
${rows.map((r) => `${doc([r.m.summary, r.m['x-alias-of'] ? `Alias of ${r.m['x-alias-of']}.` : ''].filter(Boolean).join(' '), '  ')}  ${camel(r.name)}(params${r.optional ? '?' : ''}: ${r.params}, opts?: CallOptions): Promise<${r.result}> {
    return this.call(${quote(r.name)}, params, opts);
  }`).join('\n')}
}
`);

  // Notifications and server requests.
  const notes = [...(d['x-notifications'] ?? [])].sort((a, b) => a.name.localeCompare(b.name));
  const noteRows = notes.map((n) => {
    const name = `${pascal(n.name)}Notification`;
    const direct = n.params?.length === 1 && n.params[0].name === 'params' ? n.params[0].schema : null;
    const ps = direct ?? paramsSchema(n.params ?? []);
    // A notification whose fields are exactly a named schema's (agents.event
    // is an AgentEvent) is that schema, so the union of kinds carries over.
    const same = Object.keys(schemas).find((s) => sameFields(schemas[s], ps));
    out.push(doc(`${n.name}: ${n.summary ?? ''}`) + `export type ${name} = ${same ?? tsType(ps)};\n`);
    return { name: n.name, type: name };
  });
  out.push(`/** Every notification the daemon sends, by method. */
export interface Notifications {
${noteRows.map((r) => `  ${quote(r.name)}: ${r.type};`).join('\n')}
}
`);
  const reqs = [...(d['x-server-requests'] ?? [])].sort((a, b) => a.name.localeCompare(b.name));
  out.push(`/** Every request the daemon sends a client, by method: the params it sends and the result it expects. */
export interface ServerRequests {
${reqs.map((r) => {
    const ps = paramsSchema(r.params ?? []);
    const same = Object.keys(schemas).find((s) => sameFields(schemas[s], ps));
    return `  ${quote(r.name)}: { params: ${same ?? tsType(ps, '  ')}; result: ${tsType(r.result?.schema, '  ')} };`;
  }).join('\n')}
}
`);

  // Errors.
  const errs = Object.entries(d.components?.errors ?? {}).sort((a, b) => /** @type {any} */ (b[1]).code - /** @type {any} */ (a[1]).code);
  out.push(`/** Every error code the daemon answers with, by name (components.errors). Match on the code, never on the message. */
export const errorCodes = {
${errs.map(([n, e]) => `${doc(/** @type {any} */ (e).message, '  ')}  ${key(n)}: ${/** @type {any} */ (e).code},`).join('\n')}
} as const;
export type ErrorName = keyof typeof errorCodes;
export type ErrorCode = (typeof errorCodes)[ErrorName];
`);
  return out.join('\n');
}

/**
 * Whether an object schema has exactly the fields (and types) of another.
 * @param {any} a @param {any} b
 */
function sameFields(a, b) {
  if (!a?.properties || !b?.properties) return false;
  const ka = Object.keys(a.properties).sort();
  const kb = Object.keys(b.properties).sort();
  if (ka.join() !== kb.join()) return false;
  return ka.every((k) => tsType(a.properties[k]) === tsType(b.properties[k]));
}

/**
 * Builds card from this repository into dir and returns its path.
 * @param {string} dir
 */
export function buildCard(dir) {
  const bin = join(dir, 'card');
  execFileSync('go', ['build', '-o', bin, './cmd/card'], { cwd: repoRoot, stdio: ['ignore', 'inherit', 'inherit'] });
  return bin;
}

/**
 * Starts `card serve` on a random loopback port in a new private home and
 * resolves once it has written daemon.json; args go after serve's own
 * (`--fake-agents` for the tests that drive card's fake agents).
 * @param {string} card
 * @param {{ home?: string, env?: NodeJS.ProcessEnv, config?: string, args?: string[] }} [opts]
 */
export async function serve(card, opts = {}) {
  const home = opts.home ?? join(mkdtempSync(join(tmpdir(), 'card-ts-')), 'home');
  const { mkdirSync } = await import('node:fs');
  mkdirSync(home, { recursive: true, mode: 0o700 });
  if (opts.config !== undefined) writeFileSync(join(home, 'card.toml'), opts.config, { mode: 0o600 });
  const child = spawn(card, ['serve', '--home', home, '--addr', '127.0.0.1:0', '--log-level', 'warn', ...(opts.args ?? [])], {
    env: opts.env ?? { PATH: '/usr/bin:/bin', HOME: home },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr?.on('data', (b) => { stderr += b; });
  const exited = new Promise((res) => child.once('exit', res));
  const deadline = Date.now() + 20_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`card serve exited ${child.exitCode}: ${stderr}`);
    if (existsSync(join(home, 'daemon.json'))) {
      try {
        const disc = JSON.parse(readFileSync(join(home, 'daemon.json'), 'utf8'));
        if (disc.pid === child.pid) break;
      } catch { /* being written */ }
    }
    if (Date.now() > deadline) { child.kill('SIGKILL'); throw new Error(`card serve wrote no daemon.json in 20s: ${stderr}`); }
    await new Promise((r) => setTimeout(r, 25));
  }
  return {
    home,
    child,
    pid: /** @type {number} */ (child.pid),
    stderr: () => stderr,
    /** Stops the daemon (SIGTERM, then SIGKILL after 5 s) and waits for it. */
    async stop(signal = /** @type {NodeJS.Signals} */ ('SIGTERM')) {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill(signal);
        const t = setTimeout(() => child.kill('SIGKILL'), 5000);
        await exited;
        clearTimeout(t);
      }
    },
  };
}

/**
 * Asks the daemon of home for rpc.discover over a bare WebSocket (the
 * generator must not need the package it generates).
 * @param {string} home
 */
export async function discover(home) {
  const disc = JSON.parse(readFileSync(join(home, 'daemon.json'), 'utf8'));
  const token = readFileSync(join(home, 'token'), 'utf8').trim();
  const ws = new WebSocket(disc.url, { headers: { Authorization: `Bearer ${token}` }, maxPayload: 64 << 20 });
  return await new Promise((res, rej) => {
    ws.once('error', rej);
    ws.once('open', () => ws.send(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'rpc.discover' })));
    ws.on('message', (m) => {
      const msg = JSON.parse(String(m));
      if (msg.id !== 1) return;
      ws.close();
      if (msg.error) rej(new Error(`rpc.discover: ${msg.error.message}`)); else res(msg.result);
    });
  });
}

/** The document of a freshly built daemon of this repository. */
export async function discoverFromSource(card = '') {
  const tmp = mkdtempSync(join(tmpdir(), 'card-gen-'));
  try {
    const bin = card || buildCard(tmp);
    const d = await serve(bin, { home: join(tmp, 'home') });
    try { return await discover(d.home); } finally { await d.stop(); }
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
}

async function main() {
  const args = process.argv.slice(2);
  const opt = (/** @type {string} */ name) => { const i = args.indexOf(name); return i >= 0 ? args[i + 1] : undefined; };
  const from = opt('--from');
  const doc = from ? JSON.parse(readFileSync(from, 'utf8')) : await discoverFromSource(opt('--card') ?? '');
  const text = generate(doc);
  if (args.includes('--check')) {
    const have = existsSync(generatedPath) ? readFileSync(generatedPath, 'utf8') : '';
    if (have !== text) { console.error(`${generatedPath} is out of date: run \`npm run gen\``); process.exit(1); }
    console.log(`${generatedPath} is up to date`);
    return;
  }
  writeFileSync(generatedPath, text);
  console.log(`wrote ${generatedPath} (${doc.methods?.length ?? 0} methods, ${Object.keys(doc.components?.schemas ?? {}).length} schemas)`);
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main().catch((e) => { console.error(e instanceof Error ? e.message : e); process.exit(1); });
}
