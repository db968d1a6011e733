// Drives `card acp ADAPTER` with the official ACP TypeScript SDK's client
// side (ClientApp over ndJsonStream, the SDK's stdio transport), as an editor
// would, against a running card daemon. The Go test in this directory
// starts the daemon and the agent's stand-in, and sets:
//
//   CARD_BIN, CARD_HOME     the card binary and the daemon's home
//   ACP_ADAPTER, ACP_CWD    the adapter and the session's working directory
//   ACP_FRAMES              a file every frame card sent is appended to,
//                           for the Go side to check against the schema
//   ACP_PROMPT_*            prompts that make this adapter's agent answer,
//                           call a tool, or run long (see the Go test)
//   ACP_EXPECT_*            what the answers must contain
//   ACP_IMAGE               "1" when the adapter takes images
//   ACP_TOOL_FILE           the file the agent's tool call writes, when the
//                           model is scripted to write a fixed one
//   ACP_DEFAULT_PERMISSION  the option kind a test that does not care picks
//   ACP_REMEMBER_MODE       the permission mode of the two-turn session
//   ACP_SKIP_RECALL         why the second turn is not checked, if it is not
//   ACP_MODE_RECALL         "1" when a turn after session/set_mode must go
//                           on with the conversation (ACP_PROMPT_MODE_*)
//   ACP_MODEL               a model the CLI takes against its stand-in, for
//                           a turn after session/set_config_option
//   ACP_EXPECT_COMMANDS     "1" when the CLI lists its slash commands
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { appendFileSync, existsSync, rmSync } from "node:fs";
import { join } from "node:path";
import { Readable, Writable, Transform } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";

const env = process.env;
const adapter = env.ACP_ADAPTER;
const cwd = env.ACP_CWD;
const turnTimeout = Number(env.ACP_TURN_TIMEOUT_MS || 120000);

// A 1×1 PNG.
const png =
  "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";

// agent starts `card acp` and connects the SDK's client to it. onPermission
// answers session/request_permission; every update is kept in order.
function agent({ home = env.CARD_HOME, onPermission } = {}) {
  const child = spawn(env.CARD_BIN, ["acp", adapter, "--home", home], {
    stdio: ["pipe", "pipe", "pipe"],
    env: { ...process.env },
  });
  let stderr = "";
  child.stderr.on("data", (b) => (stderr += b));
  const methods = new Map(); // our request ids → method, to name answers
  const stdoutLines = [];
  let pending = "";
  const tee = new Transform({
    transform(chunk, _enc, cb) {
      pending += chunk.toString("utf8");
      let i;
      while ((i = pending.indexOf("\n")) >= 0) {
        const line = pending.slice(0, i);
        pending = pending.slice(i + 1);
        if (line.trim() === "") continue;
        stdoutLines.push(line);
        let method = null;
        try {
          const m = JSON.parse(line);
          if (m.id !== undefined && m.method === undefined) method = methods.get(JSON.stringify(m.id)) ?? null;
        } catch {
          method = "NOT JSON";
        }
        if (env.ACP_FRAMES) appendFileSync(env.ACP_FRAMES, JSON.stringify({ from: "agent", answers: method, frame: line }) + "\n");
      }
      cb(null, chunk);
    },
  });
  child.stdout.pipe(tee);
  const record = new Transform({
    transform(chunk, _enc, cb) {
      for (const line of chunk.toString("utf8").split("\n")) {
        if (!line.trim()) continue;
        try {
          const m = JSON.parse(line);
          if (m.id !== undefined && m.method !== undefined) methods.set(JSON.stringify(m.id), m.method);
        } catch {}
        if (env.ACP_FRAMES) appendFileSync(env.ACP_FRAMES, JSON.stringify({ from: "client", frame: line }) + "\n");
      }
      cb(null, chunk);
    },
  });
  record.pipe(child.stdin);
  const updates = [];
  const asked = [];
  const app = new acp.ClientApp()
    .onNotification("session/update", ({ params }) => {
      updates.push(params);
    })
    .onRequest("session/request_permission", async ({ params: req }) => {
      asked.push(req);
      if (onPermission) return onPermission(req);
      if (env.ACP_DEFAULT_PERMISSION) return pick(req, env.ACP_DEFAULT_PERMISSION);
      return { outcome: { outcome: "cancelled" } };
    });
  const conn = app.connect(acp.ndJsonStream(Writable.toWeb(record), Readable.toWeb(tee)));
  const exited = new Promise((resolve) => child.on("exit", (code) => resolve(code)));
  return {
    child,
    conn,
    updates,
    asked,
    stdoutLines,
    get stderr() {
      return stderr;
    },
    exited,
    request: (method, params) => conn.agent.request(method, params),
    notify: (method, params) => conn.agent.notify(method, params),
    async close() {
      child.stdin.end();
      const t = setTimeout(() => child.kill("SIGKILL"), 10000);
      const code = await exited;
      clearTimeout(t);
      return code;
    },
  };
}

function pick(req, kind) {
  const o = req.options.find((o) => o.kind === kind);
  assert.ok(o, `no ${kind} option in ${JSON.stringify(req.options)}`);
  return { outcome: { outcome: "selected", optionId: o.optionId } };
}

async function initialize(a) {
  const r = await a.request("initialize", {
    protocolVersion: acp.PROTOCOL_VERSION,
    clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal: false },
    clientInfo: { name: "card-acp-e2e", version: "1" },
  });
  assert.equal(r.protocolVersion, 1);
  return r;
}

async function newSession(a, mode) {
  const params = { cwd, mcpServers: [] };
  if (mode) params._meta = { card: { permissionMode: mode } };
  const r = await a.request("session/new", params);
  assert.ok(r.sessionId, "a session id");
  return r.sessionId;
}

function withTimeout(p, ms, what) {
  let t;
  return Promise.race([
    p.finally(() => clearTimeout(t)),
    new Promise((_, reject) => (t = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms))),
  ]);
}

async function prompt(a, sessionId, blocks) {
  if (typeof blocks === "string") blocks = [{ type: "text", text: blocks }];
  return withTimeout(a.request("session/prompt", { sessionId, prompt: blocks }), turnTimeout, "session/prompt");
}

function text(updates, sessionId, kind = "agent_message_chunk") {
  return updates
    .filter((u) => u.sessionId === sessionId && u.update.sessionUpdate === kind)
    .map((u) => u.update.content.text)
    .join("");
}

// updatesOf waits up to 2 s for the session's first update of kind, then
// returns all of that kind so far: an update that comes from the session's
// own stream (a mode or config change every editor hears) may follow the
// answer of the request that made it.
async function updatesOf(a, sessionId, kind) {
  const of = () => a.updates.filter((u) => u.sessionId === sessionId && u.update.sessionUpdate === kind);
  for (let i = 0; i < 200 && of().length === 0; i++) {
    await new Promise((done) => setTimeout(done, 10));
  }
  return of();
}

function kinds(updates, sessionId) {
  return updates.filter((u) => u.sessionId === sessionId).map((u) => u.update.sessionUpdate);
}

test("initialize tells the adapter's capabilities and nothing but ACP reaches stdout", async () => {
  const a = agent();
  try {
    const r = await initialize(a);
    assert.equal(r.agentInfo.name, "card");
    assert.equal(r.agentCapabilities.loadSession, true);
    assert.equal(r.agentCapabilities.promptCapabilities.image, env.ACP_IMAGE === "1");
    assert.ok(r.agentCapabilities.sessionCapabilities.list);
    assert.ok(r.agentCapabilities.sessionCapabilities.resume);
    assert.ok(r.agentCapabilities.sessionCapabilities.close);
    assert.deepEqual(r.authMethods.map((m) => m.id), [adapter]);
  } finally {
    await a.close();
  }
  for (const line of a.stdoutLines) assert.doesNotThrow(() => JSON.parse(line), `stdout carries only ACP: ${line}`);
});

test("a prompt is streamed as agent_message_chunk updates, and a second turn remembers the first", async (t) => {
  const a = agent();
  try {
    await initialize(a);
    const id = await newSession(a, env.ACP_REMEMBER_MODE);
    const r1 = await prompt(a, id, env.ACP_PROMPT_REMEMBER);
    assert.equal(r1.stopReason, "end_turn");
    assert.ok(kinds(a.updates, id).includes("agent_message_chunk"), JSON.stringify(kinds(a.updates, id)));
    assert.ok(text(a.updates, id).includes(env.ACP_EXPECT_REMEMBER), `answer: ${text(a.updates, id)}`);
    for (const u of a.updates) assert.equal(u._meta.card.turn, 1, "every update names its turn");
    if (env.ACP_EXPECT_COMMANDS === "1") {
      const lists = a.updates.filter((u) => u.sessionId === id && u.update.sessionUpdate === "available_commands_update");
      assert.equal(lists.length, 1, "the slash commands are sent once");
      const names = lists[0].update.availableCommands.map((c) => c.name);
      assert.ok(names.includes("compact"), JSON.stringify(names));
      assert.ok(!names.includes("heapdump"), "a command card does not offer was listed");
    }
    if (env.ACP_SKIP_RECALL) {
      t.diagnostic(`second turn not checked: ${env.ACP_SKIP_RECALL}`);
      return;
    }
    const before = a.updates.length;
    const r2 = await prompt(a, id, env.ACP_PROMPT_RECALL);
    assert.equal(r2.stopReason, "end_turn");
    const second = a.updates.slice(before).filter((u) => u.update.sessionUpdate === "agent_message_chunk").map((u) => u.update.content.text).join("");
    assert.ok(second.includes(env.ACP_EXPECT_RECALL), `second answer: ${second}`);
  } finally {
    await a.close();
  }
});

test("an image reaches the agent", { skip: env.ACP_IMAGE !== "1" && "this adapter takes no images" }, async () => {
  const a = agent();
  try {
    await initialize(a);
    const id = await newSession(a);
    const r = await prompt(a, id, [
      { type: "text", text: env.ACP_PROMPT_IMAGE },
      { type: "image", mimeType: "image/png", data: png },
    ]);
    assert.equal(r.stopReason, "end_turn");
    if (env.ACP_EXPECT_IMAGE) assert.ok(text(a.updates, id).includes(env.ACP_EXPECT_IMAGE), text(a.updates, id));
  } finally {
    await a.close();
  }
});

for (const [name, kind, want] of [
  ["allowed", "allow_once", true],
  ["denied", "reject_once", false],
]) {
  test(`a tool call is asked with session/request_permission and ${name}`, async () => {
    // A scripted model (the real CLIs' stand-ins) writes one fixed file.
    const file = env.ACP_TOOL_FILE || join(cwd, `acp-${name}.txt`);
    rmSync(file, { force: true });
    const a = agent({ onPermission: (req) => pick(req, kind) });
    try {
      await initialize(a);
      const id = await newSession(a);
      const r = await prompt(a, id, env.ACP_PROMPT_TOOL.replaceAll("FILE", file));
      assert.equal(r.stopReason, "end_turn");
      assert.equal(a.asked.length >= 1, true, "asked at least once");
      const q = a.asked[0];
      assert.equal(q.sessionId, id);
      assert.ok(q.toolCall.toolCallId);
      assert.deepEqual(q.options.map((o) => o.kind).sort(), ["allow_always", "allow_once", "reject_always", "reject_once"]);
      const k = kinds(a.updates, id);
      assert.ok(k.includes("tool_call"), JSON.stringify(k));
      assert.equal(existsSync(file), want, `the file exists only when the call was allowed (${file})`);
    } finally {
      await a.close();
    }
  });
}

test("session/set_mode to ask before the first turn: the turn's tool call is asked, as a read_only turn's would not be", async () => {
  const file = env.ACP_TOOL_FILE || join(cwd, "acp-set-mode.txt");
  rmSync(file, { force: true });
  const a = agent({ onPermission: (req) => pick(req, "allow_once") });
  try {
    await initialize(a);
    const r = await a.request("session/new", { cwd, mcpServers: [], _meta: { card: { permissionMode: "read_only" } } });
    assert.equal(r.modes.currentModeId, "read_only");
    const set = await a.request("session/set_mode", { sessionId: r.sessionId, modeId: "ask" });
    assert.equal(set._meta.card.appliesFromTurn, 1);
    const modeUpdates = await updatesOf(a, r.sessionId, "current_mode_update");
    assert.deepEqual(modeUpdates.map((u) => u.update.currentModeId), ["ask"]);
    const p = await prompt(a, r.sessionId, env.ACP_PROMPT_TOOL.replaceAll("FILE", file));
    assert.equal(p.stopReason, "end_turn");
    assert.ok(a.asked.length >= 1, "the ask-mode turn asked");
    assert.equal(existsSync(file), true, "the allowed call ran");
  } finally {
    await a.close();
  }
});

test("a turn after session/set_mode goes on with the conversation", { skip: env.ACP_MODE_RECALL !== "1" && "this adapter does not resume across these modes" }, async () => {
  const a = agent();
  try {
    await initialize(a);
    const id = await newSession(a, "read_only");
    assert.equal((await prompt(a, id, env.ACP_PROMPT_MODE_REMEMBER)).stopReason, "end_turn");
    await a.request("session/set_mode", { sessionId: id, modeId: "edit" });
    assert.equal((await prompt(a, id, env.ACP_PROMPT_MODE_RECALL)).stopReason, "end_turn");
  } finally {
    await a.close();
  }
});

test("session/set_config_option model answers the new options and holds from the next turn", async () => {
  const a = agent();
  try {
    await initialize(a);
    const r = await a.request("session/new", { cwd, mcpServers: [], _meta: { card: { permissionMode: "read_only" } } });
    const ids = r.configOptions.map((o) => o.id);
    assert.equal(ids[0], "model");
    assert.equal(r.configOptions[0].currentValue, "default");
    const model = env.ACP_MODEL || "card-e2e-model";
    const set = await a.request("session/set_config_option", { sessionId: r.sessionId, configId: "model", value: model });
    assert.equal(set.configOptions.find((o) => o.id === "model").currentValue, model);
    assert.deepEqual(set.configOptions.map((o) => o.id), ids);
    const ups = await updatesOf(a, r.sessionId, "config_option_update");
    assert.equal(ups.length, 1);
    assert.equal(ups[0].update.configOptions.find((o) => o.id === "model").currentValue, model);
    if (env.ACP_MODEL) assert.equal((await prompt(a, r.sessionId, env.ACP_PROMPT_REMEMBER)).stopReason, "end_turn");
    await assert.rejects(
      a.request("session/set_config_option", { sessionId: r.sessionId, configId: "fast", value: "on" }),
      (err) => err.code === -32602,
    );
  } finally {
    await a.close();
  }
});

test("session/cancel ends the turn with stopReason cancelled", async () => {
  let cancelled;
  const asked = new Promise((resolve) => (cancelled = resolve));
  const a = agent({
    onPermission: async (req) => {
      cancelled(req);
      // The editor cancels the turn while the question is open, and then
      // answers the question cancelled, as ACP says it must.
      await a.notify("session/cancel", { sessionId: req.sessionId });
      return { outcome: { outcome: "cancelled" } };
    },
  });
  try {
    await initialize(a);
    const id = await newSession(a);
    const r = await prompt(a, id, env.ACP_PROMPT_LONG.replaceAll("FILE", join(cwd, "acp-cancel.txt")));
    await asked;
    assert.equal(r.stopReason, "cancelled");
  } finally {
    await a.close();
  }
});

test("session/load after a reconnect replays the conversation before it answers", async () => {
  const first = agent();
  let id;
  try {
    await initialize(first);
    id = await newSession(first);
    assert.equal((await prompt(first, id, env.ACP_PROMPT_REMEMBER)).stopReason, "end_turn");
  } finally {
    await first.close();
  }
  const seen = first.updates.filter((u) => u.sessionId === id);
  const second = agent();
  try {
    await initialize(second);
    await second.request("session/load", { sessionId: id, cwd, mcpServers: [] });
    const replay = second.updates.filter((u) => u.sessionId === id);
    assert.equal(replay[0].update.sessionUpdate, "user_message_chunk");
    assert.equal(replay[0].update.content.text, env.ACP_PROMPT_REMEMBER, "the prompt comes back from card's history");
    assert.deepEqual(
      replay.slice(1).map((u) => [u.update.sessionUpdate, u._meta.card.seq]),
      seen.map((u) => [u.update.sessionUpdate, u._meta.card.seq]),
      "exactly what the first connection was sent, in order, none twice",
    );
    // Reconnecting with the last seq seen replays nothing more.
    const last = seen[seen.length - 1]._meta.card.seq;
    const third = agent();
    try {
      await initialize(third);
      await third.request("session/load", { sessionId: id, cwd, mcpServers: [], _meta: { card: { afterSeq: last } } });
      assert.deepEqual(kinds(third.updates, id), []);
    } finally {
      await third.close();
    }
  } finally {
    await second.close();
  }
});

test("with no daemon, initialize answers with typed authMethods and session/new says how to start one", async () => {
  const a = agent({ home: env.ACP_EMPTY_HOME });
  try {
    const r = await initialize(a);
    assert.deepEqual(r.authMethods.map((m) => [m.id, m.type]), [[adapter, "agent"]]);
    await assert.rejects(a.request("session/new", { cwd, mcpServers: [] }), (err) => {
      assert.match(String(err.message ?? err), /card serve/);
      return true;
    });
  } finally {
    const code = await a.close();
    assert.equal(code, 3);
  }
  const lines = a.stderr.trim().split("\n");
  assert.equal(lines.length, 1, `one line on stderr: ${a.stderr}`);
  assert.match(lines[0], /no daemon running for home .*card serve/);
});
