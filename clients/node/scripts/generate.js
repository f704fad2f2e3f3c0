#!/usr/bin/env node
// `npm run generate`: write TypeScript typings for the turnkeeper.v1 contract to
// generated/ (or to the directory given as the first argument, which the freshness
// test uses). The typings describe the objects that src/proto.js loads at run time,
// because both take their options from LOADER_OPTIONS.

import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { LOADER_OPTIONS, PROTO_FILES } from '../src/proto.js';

const packageDir = fileURLToPath(new URL('..', import.meta.url));
const outDir = path.resolve(packageDir, process.argv[2] ?? 'generated');
const require = createRequire(import.meta.url);
const generator = require.resolve('@grpc/proto-loader/build/bin/proto-loader-gen-types.js');

const args = [
  generator,
  '--grpcLib=@grpc/grpc-js',
  // Relative, and run from the package directory: the path is written into every
  // file's header, and must not depend on where the repository is checked out.
  '--includeDirs=../../protos',
  `--outDir=${outDir}`,
  `--longs=${LOADER_OPTIONS.longs.name}`,
  `--enums=${LOADER_OPTIONS.enums.name}`,
  ...(LOADER_OPTIONS.keepCase ? ['--keepCase'] : []),
  ...(LOADER_OPTIONS.defaults ? ['--defaults'] : []),
  ...(LOADER_OPTIONS.oneofs ? ['--oneofs'] : []),
  // The contract's comments become doc comments in an editor.
  '--includeComments',
  ...PROTO_FILES,
];

// Start empty, so a message removed from the contract leaves no stale typing behind.
fs.rmSync(outDir, { recursive: true, force: true });
const result = spawnSync(process.execPath, args, { cwd: packageDir, stdio: 'inherit' });
if (result.error) {
  throw result.error;
}
process.exit(result.status ?? 1);
