#!/usr/bin/env node
// Fails when src/gen is not what `npm run generate` makes from ../../protos now:
// regenerates into a temporary directory (same template, same pinned buf and
// protoc-gen-es) and compares file by file. Fix: `npm run generate` and commit.

import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const here = fileURLToPath(new URL("..", import.meta.url));
const committed = join(here, "src", "gen");
const scratch = mkdtempSync(join(tmpdir(), "turnkeeper-gen-"));

function files(root) {
  return readdirSync(root, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile())
    .map((entry) => relative(root, join(entry.parentPath ?? entry.path, entry.name)))
    .sort();
}

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
  const fresh = join(scratch, "src", "gen");
  const want = files(fresh);
  const have = files(committed);
  const stale = [
    ...want.filter((f) => !have.includes(f)).map((f) => `missing: src/gen/${f}`),
    ...have.filter((f) => !want.includes(f)).map((f) => `not generated any more: src/gen/${f}`),
    ...want
      .filter((f) => have.includes(f))
      .filter((f) => readFileSync(join(fresh, f), "utf8") !== readFileSync(join(committed, f), "utf8"))
      .map((f) => `differs: src/gen/${f}`),
  ];
  if (stale.length > 0) {
    process.stderr.write(`${stale.join("\n")}\nsrc/gen is out of date with protos/: run \`npm run generate\` and commit.\n`);
    process.exit(1);
  }
  process.stdout.write(`src/gen matches protos/ (${want.length} files)\n`);
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
