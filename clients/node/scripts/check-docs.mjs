#!/usr/bin/env node
// Fails when docs/reference/typescript (the TypeScript client reference in the
// documentation site) is not what `npm run docs` makes from src/ now, or when TypeDoc
// warns (typedoc.json treats warnings as errors: a broken {@link}, a public signature
// naming a type the entry points do not export). Regenerates into a temporary
// directory and compares file by file. Fix: `npm run docs` and commit.

import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

import { differences } from "./same-tree.mjs";

const here = fileURLToPath(new URL("..", import.meta.url));
const committed = join(here, "..", "..", "docs", "reference", "typescript");
const scratch = mkdtempSync(join(tmpdir(), "turnkeeper-typedoc-"));

try {
  const typedoc = join(here, "node_modules", ".bin", "typedoc");
  const run = spawnSync(typedoc, ["--out", scratch, "--logLevel", "Warn"], { cwd: here, encoding: "utf8" });
  if (run.status !== 0) {
    process.stderr.write(`typedoc failed:\n${run.stdout}${run.stderr}`);
    process.exit(1);
  }
  const { lines, count } = differences(scratch, committed, "docs/reference/typescript");
  if (lines.length > 0) {
    process.stderr.write(`${lines.join("\n")}\nthe TypeScript reference is out of date with src/: run \`npm run docs\` and commit.\n`);
    process.exit(1);
  }
  process.stdout.write(`docs/reference/typescript matches src/ (${count} files)\n`);
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
