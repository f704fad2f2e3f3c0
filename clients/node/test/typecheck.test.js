// The JavaScript is checked against the generated typings (tsconfig.json: checkJs,
// strict), so a change to the contract that breaks the client fails here.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { it } from 'node:test';

const packageDir = fileURLToPath(new URL('..', import.meta.url));

it('type-checks with tsc --noEmit', () => {
  const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
  const result = spawnSync(process.execPath, [tsc, '-p', packageDir], { cwd: packageDir, encoding: 'utf8' });
  assert.equal(result.status, 0, `${result.stdout}${result.stderr}`);
});
