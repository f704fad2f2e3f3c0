#!/usr/bin/env node
// Fails when src/gen is not what `npm run generate` makes from ../../protos now:
// regenerates into a temporary directory (same template, same pinned buf and
// protoc-gen-es) and compares file by file. Fix: `npm run generate` and commit.

import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

import { differences } from "./same-tree.mjs";

const here = fileURLToPath(new URL("..", import.meta.url));
const committed = join(here, "src", "gen");
const scratch = mkdtempSync(join(tmpdir(), "turnkeeper-gen-"));

try {
  const buf = join(here, "node_modules", ".bin", "buf");
  const run = spawnSync(buf, ["generate", "--template", "buf.gen.yaml", "-o", scratch, join(here, "..", "..", "protos")], {
    cwd: here,
    encoding: "utf8",
    env: { ...process.env, PATH: `${join(here, "node_modules", ".bin")}:${process.env.PATH}` },
  });
  if (run.status !== 0) {
    process.stderr.write(`buf generate failed:\n${run.stdout}${run.stderr}`);
    process.exit(1);
  }
  const { lines, count } = differences(join(scratch, "src", "gen"), committed, "src/gen");
  if (lines.length > 0) {
    process.stderr.write(`${lines.join("\n")}\nsrc/gen is out of date with protos/: run \`npm run generate\` and commit.\n`);
    process.exit(1);
  }
  process.stdout.write(`src/gen matches protos/ (${count} files)\n`);
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
