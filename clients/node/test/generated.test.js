// The committed typings in generated/ are what `npm run generate` makes from the
// contract today: regenerate into a temporary directory and compare.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { it } from 'node:test';

const packageDir = fileURLToPath(new URL('..', import.meta.url));

/** @param {string} root @returns {Map<string, string>} relative path -> content */
function tree(root) {
  const files = new Map();
  for (const entry of fs.readdirSync(root, { recursive: true, withFileTypes: true })) {
    if (entry.isFile()) {
      const full = path.join(entry.parentPath ?? entry.path, entry.name);
      files.set(path.relative(root, full), fs.readFileSync(full, 'utf8'));
    }
  }
  return files;
}

it('generated/ is up to date with the protos (run `npm run generate`)', (t) => {
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'turnkeeper-generated-'));
  t.after(() => fs.rmSync(scratch, { recursive: true, force: true }));
  const outDir = path.join(scratch, 'generated');

  const result = spawnSync(process.execPath, ['scripts/generate.js', outDir], { cwd: packageDir, encoding: 'utf8' });
  assert.equal(result.status, 0, result.stderr);

  const fresh = tree(outDir);
  const committed = tree(path.join(packageDir, 'generated'));
  assert.deepEqual([...committed.keys()].sort(), [...fresh.keys()].sort());
  for (const [name, content] of fresh) {
    assert.equal(committed.get(name), content, `generated/${name} is stale`);
  }
});
