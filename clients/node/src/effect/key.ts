// An effect call's identity: its idempotency key, derived from what LangGraph.js makes
// deterministic, so it is the same in every execution of the same logical call and
// different for different calls. The parts, all from the running task's config, are
// the Python client's (turnkeeper.agent.effect.key), in the same order, and
// vectors/effect_keys.json holds both clients to them:
//
// - the thread and the turn (`configurable.thread_id`, `configurable.turn_id`): a
//   re-drive or a resume continues the same turn; a new turn replaying an old
//   checkpoint (a fork, time travel) makes new calls, with new keys;
// - the task: LangGraph's task id, computed (not drawn at random) from the checkpoint
//   the step started from, the namespace, the step, the node and its trigger, so a
//   re-drive from the same checkpoint, here or on another replica, prepares the same
//   task ids; and the task's namespace (`configurable.checkpoint_ns`), for subgraphs;
// - the node's try when a LangGraph.js RetryPolicy runs it again
//   (`executionInfo.nodeAttempt`, from the second try on): a retry is a new call, as
//   RetryPolicy means it to be;
// - the effect's name, and the call's position among the try's calls of that effect
//   (0, 1, 2 ... in the order they are made).
//
// What breaks it (docs/effects.md): calls of one effect made in a different order
// within one task from one execution to the next (concurrent calls racing, a loop
// over an unordered collection), a change of the graph's code between executions, or
// a re-drive that does not start from the step's checkpoint.

import { createHash } from "node:crypto";

import type { RunnableConfig } from "@langchain/core/runnables";

import { ATTEMPT_KEY, TURN_ID_KEY } from "../saver.js";
import { type Execution, executionOf } from "./executions.js";

// LangGraph.js's configurable keys for the running task (its constants module).
const TASK_ID = "__pregel_task_id";
const SCRATCHPAD = "__pregel_scratchpad";
const CHECKPOINT_MAP = "checkpoint_map";
const CHECKPOINTER = "__pregel_checkpointer";

/** The prefix of every key: a receiver's logs show where it came from. */
export const KEY_PREFIX = "fx-";

/** What a call's key is made of. */
export interface KeyParts {
  threadId: string;
  turnId: string;
  checkpointNs: string;
  taskId: string;
  /** The node's try under a RetryPolicy: 1, 2 ... */
  nodeAttempt: number;
  name: string;
  callIndex: number;
}

/** Where an effect is called: the turn, the task and the call's position. */
export interface CallSite extends KeyParts {
  attempt: number;
  /** The checkpoint the task's step started from. */
  checkpointId: string;
  execution: Execution;
  checkpointer: unknown;
  key: string;
}

/** The key of a call: `fx-` and 40 hex digits of a SHA-256 over its parts (UTF-8,
 * joined by U+001F; the try only from the second on, so a first try's key is the
 * same whether or not a RetryPolicy is set). */
export function keyOf(parts: KeyParts): string {
  const hashed = [parts.threadId, parts.turnId, parts.checkpointNs, parts.taskId];
  if (parts.nodeAttempt > 1) {
    hashed.push(`try-${parts.nodeAttempt}`);
  }
  hashed.push(parts.name, String(parts.callIndex));
  const digest = createHash("sha256").update(hashed.join("\u001f"), "utf8").digest("hex");
  return `${KEY_PREFIX}${digest.slice(0, 40)}`;
}

/** The node's try the running task is in: LangGraph.js counts them in the config's
 * `executionInfo` (1 when it says nothing). */
function nodeAttemptOf(config: RunnableConfig): number {
  const info = (config as { executionInfo?: { nodeAttempt?: unknown } }).executionInfo;
  const attempt = Number(info?.nodeAttempt ?? 1);
  return Number.isInteger(attempt) && attempt > 1 ? attempt : 1;
}

/** The call site of the next call of effect `name` in the running task, counted;
 * undefined outside a turn (no turn identity, or not inside a LangGraph task). */
export function callSite(config: RunnableConfig, name: string): CallSite | undefined {
  const configurable = (config.configurable ?? {}) as Record<string, unknown>;
  const turnId = configurable[TURN_ID_KEY];
  const attempt = configurable[ATTEMPT_KEY];
  const taskId = configurable[TASK_ID];
  const scratchpad = configurable[SCRATCHPAD];
  if (!turnId || attempt === undefined || attempt === null || !taskId || scratchpad === undefined) {
    return undefined;
  }
  const checkpointNs = String(configurable.checkpoint_ns ?? "");
  // The task's namespace is "<parent ns>|node:task_id"; the checkpoint map names the
  // checkpoint each enclosing graph's step started from.
  const cut = checkpointNs.lastIndexOf("|");
  const parentNs = cut < 0 ? "" : checkpointNs.slice(0, cut);
  const checkpointMap = (configurable[CHECKPOINT_MAP] ?? {}) as Record<string, unknown>;
  const execution = executionOf(String(turnId), Number(attempt), String(taskId), scratchpad);
  const nodeAttempt = nodeAttemptOf(config);
  const parts: KeyParts = {
    threadId: String(configurable.thread_id ?? ""),
    turnId: String(turnId),
    checkpointNs,
    taskId: String(taskId),
    nodeAttempt,
    name,
    callIndex: execution.nextIndex(nodeAttempt, name),
  };
  return {
    ...parts,
    attempt: Number(attempt),
    checkpointId: String(checkpointMap[parentNs] ?? ""),
    execution,
    checkpointer: configurable[CHECKPOINTER],
    key: keyOf(parts),
  };
}
