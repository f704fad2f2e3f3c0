// Loading the turnkeeper.v1 contract at run time.
//
// The .proto files in the repository's protos/ are the one source of truth, so the
// stubs are built from them when the process starts (@grpc/proto-loader) instead of
// from a second, generated copy that could drift. `npm run generate` writes the
// matching TypeScript typings to generated/ from the same files with the same
// options (LOADER_OPTIONS below), and a test fails when they are out of date.

import { fileURLToPath } from 'node:url';

import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';

/** The repository's protos/ directory (this package lives in clients/node/). */
export const PROTO_ROOT = fileURLToPath(new URL('../../../protos/', import.meta.url));

/** The contract's files, relative to PROTO_ROOT. */
export const PROTO_FILES = ['turnkeeper/v1/turns.proto', 'turnkeeper/v1/checkpoints.proto'];

/**
 * How messages look in JavaScript. scripts/generate.js passes the same options to
 * the typings generator, so the typings describe exactly these objects.
 */
export const LOADER_OPTIONS = Object.freeze({
  // Field names in lowerCamelCase (dataJson, turnId), as protobuf's JSON mapping.
  keepCase: false,
  // int64 fields (seq, last_seq) as plain numbers: a turn's seq stays far below 2^53.
  longs: Number,
  // Enums by name ('TURN_STATE_RUNNING'), which is what a person reads in JSON lines.
  enums: String,
  // Every scalar field present with its default, so `event.attempt` is 0, not undefined.
  defaults: true,
  // A virtual field naming the set member of each oneof (frame: 'event' | 'reset').
  oneofs: true,
});

/** @typedef {import('../generated/turns').ProtoGrpcType} TurnsProto */
/** @typedef {import('../generated/checkpoints').ProtoGrpcType} CheckpointsProto */
/** @typedef {TurnsProto & CheckpointsProto} TurnkeeperProto */

/** @type {TurnkeeperProto | undefined} */
let cached;

/**
 * The grpc-js package object for turnkeeper.v1 (services and message types).
 *
 * @param {string} [protoRoot] where the contract's .proto files are (default PROTO_ROOT)
 * @returns {TurnkeeperProto}
 */
export function loadTurnkeeper(protoRoot = PROTO_ROOT) {
  if (protoRoot === PROTO_ROOT && cached) {
    return cached;
  }
  const definition = protoLoader.loadSync(PROTO_FILES, {
    ...LOADER_OPTIONS,
    includeDirs: [protoRoot],
  });
  const loaded = /** @type {TurnkeeperProto} */ (
    /** @type {unknown} */ (grpc.loadPackageDefinition(definition))
  );
  if (protoRoot === PROTO_ROOT) {
    cached = loaded;
  }
  return loaded;
}
