// What the check scripts share: a tree regenerated into a scratch directory,
// compared file by file with the committed one.

import { readFileSync, readdirSync } from "node:fs";
import { join, relative } from "node:path";

function files(root) {
  return readdirSync(root, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile())
    .map((entry) => relative(root, join(entry.parentPath ?? entry.path, entry.name)))
    .sort();
}

/**
 * The differences between a fresh tree and the committed one, as lines naming each
 * file by `label/<path>`; empty when they are the same. Returns the file count too.
 */
export function differences(fresh, committed, label) {
  const want = files(fresh);
  const have = files(committed);
  const lines = [
    ...want.filter((f) => !have.includes(f)).map((f) => `missing: ${label}/${f}`),
    ...have.filter((f) => !want.includes(f)).map((f) => `not generated any more: ${label}/${f}`),
    ...want
      .filter((f) => have.includes(f))
      .filter((f) => readFileSync(join(fresh, f), "utf8") !== readFileSync(join(committed, f), "utf8"))
      .map((f) => `differs: ${label}/${f}`),
  ];
  return { lines, count: want.length };
}
