/**
 * What runs inside an agent, on LangGraph.js: the checkpointer (`TurnkeeperSaver`)
 * and the durable turn runner (`TurnRunner`). LangGraph.js is an optional peer
 * dependency: install `@langchain/langgraph`, `@langchain/langgraph-checkpoint` and
 * `@langchain/core` beside this package to use it. The client, the follower and the
 * states are the package's main entry point, `@turnkeeper/client`.
 *
 * @module @turnkeeper/client/agent
 */

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
export {
  type EffectContext,
  type EffectOptions,
  type EffectPolicyName,
  UNCERTAIN_INTERRUPT,
  effect,
  effectKey,
} from "./effect/effect.js";
export { EffectError, EffectFailed, EffectOutsideTurnkeeperSaver, EffectUncertain } from "./effect/errors.js";
export { KEY_PREFIX as EFFECT_KEY_PREFIX } from "./effect/key.js";
export {
  type BranchLike,
  type CheckpointLike,
  type Describable,
  GraphVersion,
  type NodeLike,
  type Stamp,
  graphShape,
} from "./runner/version.js";
export { emitEvent } from "./runner/events.js";
export { type EventLog } from "./runner/events.js";
export { type Identity, type RunnableGraph, idempotencyKey } from "./runner/execution.js";
export {
  type Compilable,
  TurnRunner,
  type RunnerConfig,
  type TurnRunnerOptions,
  agentSubject,
  runnerConfigFromEnv,
} from "./runner/runner.js";
