// An effect call's identity: its idempotency key, derived from what LangGraph.js makes
// deterministic, so it is the same in every execution of the same logical call and
// different for different calls. The parts, all from the running task's config, are
// the Python client's (turnkeeper.agent.effect.key):
//
// - the thread (`configurable.thread_id`);
// - the task: LangGraph's task id, computed (not drawn at random) from the checkpoint
//   the step started from, the namespace, the step, the node and its trigger, so a
//   re-drive from the same checkpoint, here or on another replica, prepares the same
//   task ids; and the task's namespace (`configurable.checkpoint_ns`), for subgraphs;
// - the effect's name, and the call's position among the task's calls of that effect
//   in this execution (0, 1, 2 ... in the order they are made). A LangGraph.js
//   RetryPolicy retry keeps the execution, so its calls take the next positions: a
//   retry is a new call, as RetryPolicy means it to be.
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

/** Where an effect is called: the turn, the task and the call's position. */
export interface CallSite {
  turnId: string;
  attempt: number;
  threadId: string;
  taskId: string;
  checkpointNs: string;
  /** The checkpoint the task's step started from. */
  checkpointId: string;
  name: string;
  callIndex: number;
  execution: Execution;
  checkpointer: unknown;
  key: string;
}

/** The key of a call: `fx-` and 40 hex digits of a SHA-256 over its parts. */
export function keyOf(threadId: string, checkpointNs: string, taskId: string, name: string, callIndex: number): string {
  const digest = createHash("sha256")
    .update([threadId, checkpointNs, taskId, name, String(callIndex)].join("\u001f"))
    .digest("hex");
  return `${KEY_PREFIX}${digest.slice(0, 40)}`;
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
  const threadId = String(configurable.thread_id ?? "");
  const callIndex = execution.nextIndex(name);
  return {
    turnId: String(turnId),
    attempt: Number(attempt),
    threadId,
    taskId: String(taskId),
    checkpointNs,
    checkpointId: String(checkpointMap[parentNs] ?? ""),
    name,
    callIndex,
    execution,
    checkpointer: configurable[CHECKPOINTER],
    key: keyOf(threadId, checkpointNs, String(taskId), name, callIndex),
  };
}
