// The package's modules import one another in one direction. A circle of
// imports makes what a module sees at load time depend on which one was
// loaded first: under CommonJS (dist/cjs, an Electron app's require) the
// later one gets a half-filled exports object, and a class used at load
// time is undefined.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const src = fileURLToPath(new URL('../src', import.meta.url));
const fromRE = /\bfrom\s+'\.\/([\w.-]+)\.js'/g;

/** Each module of src by name, with the modules of src it imports or re-exports. */
function importGraph(dir) {
  const graph = new Map();
  for (const f of readdirSync(dir).filter((f) => f.endsWith('.ts'))) {
    const text = readFileSync(`${dir}/${f}`, 'utf8');
    graph.set(f.replace(/\.ts$/, ''), [...text.matchAll(fromRE)].map((m) => m[1]));
  }
  return graph;
}

/** A circle of imports in graph, as the names around it, or null. */
function findCircle(graph) {
  const state = new Map(); // 1: on the current path, 2: done
  const path = [];
  const visit = (m) => {
    if (state.get(m) === 2) return null;
    if (state.get(m) === 1) return [...path.slice(path.indexOf(m)), m];
    state.set(m, 1);
    path.push(m);
    for (const next of graph.get(m) ?? []) {
      const c = visit(next);
      if (c) return c;
    }
    path.pop();
    state.set(m, 2);
    return null;
  };
  for (const m of graph.keys()) {
    const c = visit(m);
    if (c) return c;
  }
  return null;
}

test('no module of the package imports, through others, a module that imports it', () => {
  const graph = importGraph(src);
  assert.ok(graph.size > 5 && graph.has('errors') && graph.has('home'), `src's modules were not found: ${[...graph.keys()]}`);
  const circle = findCircle(graph);
  assert.equal(circle, null, `src imports in a circle: ${circle?.join(' → ')}`);
});

test('the circle check finds a circle of imports', () => {
  const graph = new Map([['a', ['b']], ['b', ['c']], ['c', ['a']], ['d', ['a']]]);
  assert.deepEqual(findCircle(graph), ['a', 'b', 'c', 'a']);
  assert.equal(findCircle(new Map([['a', ['b']], ['b', []], ['c', ['a', 'b']]])), null);
});
