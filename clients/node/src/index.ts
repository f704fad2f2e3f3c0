// @turnkeeper/client: the turnkeeper service for Node.js agents and tools.

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
  type Frame,
  followTurn,
  stateName,
} from "./follow.js";
export {
  ATTEMPT_KEY,
  DURABILITY,
  TURN_ID_KEY,
  TurnkeeperSaver,
  type TurnkeeperSaverOptions,
  durableConfig,
  durableRunOptions,
} from "./saver.js";
export { BoundarySaver } from "./runner/boundary.js";
export { emitEvent } from "./runner/events.js";
export { idempotencyKey } from "./runner/execution.js";
export { TurnRunner, type RunnerConfig, type TurnRunnerOptions, agentSubject, runnerConfigFromEnv } from "./runner/runner.js";
export { contractWord, stateFromWire, stateOfAnswer, statusWord } from "./runner/status.js";
export { fromValue, toValue, type JsonValue } from "./values.js";
export * as callerAssertion from "./callerAssertion.js";
export * as turnsProto from "./gen/turnkeeper/v1/turns_pb.js";
export * as checkpointsProto from "./gen/turnkeeper/v1/checkpoints_pb.js";

export { type NatsIdentity, natsIdentityOf } from "./natsIdentity.js";
