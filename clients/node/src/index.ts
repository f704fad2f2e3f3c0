/**
 * The turnkeeper service for Node.js tools and panels: the client of every RPC, the
 * turn follower, states and errors. Nothing here loads LangGraph.js: the
 * checkpointer and the turn runner are the `@turnkeeper/client/agent` entry point
 * (src/agent.ts), for agents.
 *
 * @module @turnkeeper/client
 */

export {
  ON_BEHALF_OF,
  STREAM_CALL,
  TurnkeeperClient,
  type CheckpointServiceClient,
  type OperationsServiceClient,
  type TurnServiceClient,
  onBehalfOf,
} from "./client.js";
export { type ConnectionOptions, DEFAULT_ADDRESS, connectionFromEnv } from "./connection.js";
export { Code, ConnectError, codeName, codeOf, isFenced, isRetryable, messageOf } from "./errors.js";
export {
  EXIT_CODES,
  FOLLOW_DEFAULTS,
  LIVE_STATES,
  type FollowOptions,
  type FollowResult,
  type EventFrame,
  type Frame,
  type ResetFrame,
  type StatusFrame,
  followTurn,
} from "./follow.js";
export { type RetryPolicy } from "./retry.js";
export { type TurnStateName, type TurnStatusView, stateName, statusView } from "./states.js";
export { contractWord, stateFromWire, stateOfAnswer, statusWord } from "./runner/status.js";
export { fromValue, toValue, type JsonValue } from "./values.js";
export * as callerAssertion from "./callerAssertion.js";
export * as turnsProto from "./gen/turnkeeper/v1/turns_pb.js";
export * as checkpointsProto from "./gen/turnkeeper/v1/checkpoints_pb.js";
export * as operationsProto from "./gen/turnkeeper/v1/operations_pb.js";

export { type NatsIdentity, natsIdentityOf } from "./natsIdentity.js";
