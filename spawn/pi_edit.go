package spawn

// Pi has no sandbox and no permission rules: its write and edit tools write
// any path the user can, so handing them to the model is not, by itself, an
// edit mode (seen with Pi 0.73.1: a write of a sibling of the working dir
// created it). In edit mode card loads one extension of its own, piEditGate,
// from the run's private dir (-e, which --no-extensions leaves working): it
// blocks every edit or write whose path does not resolve, symlinks and all,
// under the working dir, and every tool that is neither a read tool nor one
// of those two. Pi's own code then keeps the boundary, as Claude's keeps its
// allowlist; no tool edit mode offers can make a symlink, so the paths the
// gate resolved stay what they were when the tool runs.

// piEditGateFile is the private file holding the extension.
const piEditGateFile = "card-edit-gate.ts"

// piEditWriters are the tools the gate lets change files inside the cwd.
var piEditWriters = []string{"edit", "write"}

// piEditGate resolves a path exactly as Pi's tools do (path-utils.js
// resolveToCwd in 0.73.1: a leading "@" dropped, Unicode spaces made plain,
// "~" and "~/" the home, relative to the working dir), then follows
// symlinks through every part that exists with the system's own realpath
// (realpathSync.native: the plain realpathSync takes ".." away lexically
// first, while the kernel takes it after following a link, so
// "<cwd>/link/../x" looked inside and was written beside the cwd). A path
// that still holds a ".." segment once resolved as Pi does (only an
// absolute one can) is blocked outright, and so is one that ends in a
// symlink pointing nowhere (the write would follow it and create its
// target): blocked rather than reasoned about.
var piEditGate = `// card's edit-mode gate: edit and write may change files under the working
// dir only; read tools run as they are; anything else is blocked.
import { lstatSync, realpathSync } from "node:fs";
import * as os from "node:os";
import { basename, dirname, isAbsolute, join, resolve, sep } from "node:path";

export default function (pi: any) {
  const readOnly = new Set(` + mustJSON(piReadOnlyTools) + `);
  const writers = new Set(` + mustJSON(piEditWriters) + `);
  const root = realpathSync.native(process.cwd());
  const under = (p: string) => p === root || p.startsWith(root.endsWith(sep) ? root : root + sep);
  const likePi = (raw: string) => {
    let p = raw.startsWith("@") ? raw.slice(1) : raw;
    p = p.replace(/[\u00A0\u2000-\u200A\u202F\u205F\u3000]/g, " ");
    if (p === "~") p = os.homedir();
    else if (p.startsWith("~/")) p = os.homedir() + p.slice(1);
    return isAbsolute(p) ? p : resolve(process.cwd(), p);
  };
  const real = (p: string) => {
    const rest: string[] = [];
    let cur = p;
    for (;;) {
      try {
        return join(realpathSync.native(cur), ...rest);
      } catch (e: any) {
        if (e?.code !== "ENOENT") throw e;
        let link = false;
        try { link = lstatSync(cur).isSymbolicLink(); } catch {}
        if (link) throw new Error("a symbolic link that points nowhere");
      }
      const parent = dirname(cur);
      if (parent === cur) throw new Error("no part of it exists");
      rest.unshift(basename(cur));
      cur = parent;
    }
  };
  pi.on("tool_call", async (event: any) => {
    if (readOnly.has(event.toolName)) return undefined;
    const deny = (why: string) => ({ block: true, reason: "card's edit mode refused this " + event.toolName + " call: " + why });
    if (!writers.has(event.toolName)) return deny("edit mode offers no such tool");
    const input = event.input ?? {};
    const paths = [input.path, input.file_path].filter((p: any) => p !== undefined);
    if (paths.length === 0) return deny("it names no path");
    for (const raw of paths) {
      if (typeof raw !== "string" || raw === "") return deny("its path is not a string");
      const abs = likePi(raw);
      if (abs.split(sep).includes("..")) return deny(raw + " holds a '..', which the system would take after following links");
      let p: string;
      try { p = real(abs); } catch (e: any) { return deny(raw + " cannot be resolved safely (" + (e?.message ?? e) + ")"); }
      if (!under(p)) return deny(raw + " is outside the working dir " + root + "; edit mode changes files under it only");
    }
    return undefined;
  });
}
`
