// What a turn's journaled input asks for: new input, a continuation, or a
// regenerate, read back the same way by the first execution and by a re-drive (the
// Python bridge's rule, so either can run a thread's turns).
//
// - null: continue the thread from its latest checkpoint (stream(null));
// - {"__turnkeeper__": "regenerate"}: go back to the entry node of the thread's
//   latest run (the checkpoint right after its input) and run from there: the latest
//   input is answered again, the old answer left in the history;
// - anything else: new input, handed to the runner's inputMapper.

import type { RunnableConfig } from "@langchain/core/runnables";

import { Code, codeOf } from "../errors.js";

export const INTENT_KEY = "__turnkeeper__";
export const REGENERATE_INPUT = Object.freeze({ [INTENT_KEY]: "regenerate" });

const isObject = (value: unknown): value is Record<string, unknown> =>
  value !== null && typeof value === "object" && !Array.isArray(value);

export function isRegenerate(journaled: unknown): boolean {
  return isObject(journaled) && Object.keys(journaled).length === 1 && journaled[INTENT_KEY] === "regenerate";
}

/** An input responses/create refuses: it would read as a marker. */
export function isReserved(payload: unknown): boolean {
  return isObject(payload) && INTENT_KEY in payload;
}

export interface HistoryGraph {
  getStateHistory(config: RunnableConfig): AsyncIterable<{ config: RunnableConfig; metadata?: unknown }>;
}

/**
 * The checkpoint right after the latest run's input on the thread of `config`
 * (its input applied, no node run yet); undefined when there is no run to go back
 * to. With tokens on, a thread that holds no turn of this agent is closed to it
 * (PERMISSION_DENIED): nothing of ours to regenerate there.
 */
export async function entryCheckpointId(graph: HistoryGraph, config: RunnableConfig): Promise<string | undefined> {
  let newer: { config: RunnableConfig } | undefined;
  try {
    for await (const snapshot of graph.getStateHistory(config)) {
      const source = isObject(snapshot.metadata) ? snapshot.metadata.source : undefined;
      if (source === "input") {
        const id = newer?.config.configurable?.checkpoint_id as unknown;
        return typeof id === "string" && id ? id : undefined;
      }
      newer = snapshot;
    }
  } catch (error) {
    if (codeOf(error) === Code.PermissionDenied) {
      return undefined;
    }
    throw error;
  }
  return undefined;
}

/** `config` pointed at `checkpointId` (same thread and namespace). */
export function atCheckpoint(config: RunnableConfig, checkpointId: string): RunnableConfig {
  return { ...config, configurable: { ...config.configurable, checkpoint_id: checkpointId } };
}
