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

/** The options of a LangGraph API run (the service's `run` param of responses/create),
 * journaled with its input as `{"__turnkeeper__": "run", input, ...options}` so every
 * execution of the turn runs it the same way (the Python bridge's RunIntent). */
export interface RunIntent {
  input: unknown;
  command?: { resume?: unknown; update?: unknown; goto?: unknown };
  checkpoint_id?: string;
  interrupt_before?: string[] | "*";
  interrupt_after?: string[] | "*";
  stream?: string[];
  config?: Record<string, unknown>;
  context?: Record<string, unknown>;
  /** false: the run's stream shows no model token (it asked for neither `messages`
   * mode), so none is journaled (decision 770); absent: tokens are journaled. */
  tokens?: boolean;
}

export const RUN_OPTIONS = [
  "command",
  "checkpoint_id",
  "interrupt_before",
  "interrupt_after",
  "stream",
  "config",
  "context",
  "tokens",
] as const;

/** `run`'s options, checked as the Python bridge checks them (the service has checked
 * them first): an Error saying what is wrong. */
export function parseRun(options: unknown, input: unknown): RunIntent {
  if (!isObject(options)) {
    throw new Error("run must be an object");
  }
  const unknown = Object.keys(options)
    .filter((key) => !(RUN_OPTIONS as readonly string[]).includes(key))
    .sort();
  if (unknown.length > 0) {
    throw new Error(`run: unknown option(s) ${unknown.join(", ")}`);
  }
  const intent: RunIntent = { input };
  const command = options.command;
  if (command !== undefined && command !== null) {
    if (!isObject(command) || Object.keys(command).some((k) => !["resume", "update", "goto"].includes(k))) {
      throw new Error("run.command must be an object of resume, update and goto");
    }
    if (Object.keys(command).length > 0) {
      if (input !== null && input !== undefined) {
        throw new Error("run: send input or a command, not both");
      }
      intent.command = command;
    }
  }
  const checkpointId = options.checkpoint_id;
  if (checkpointId !== undefined && checkpointId !== null) {
    if (typeof checkpointId !== "string" || !checkpointId) {
      throw new Error("run.checkpoint_id must be a non-empty string");
    }
    intent.checkpoint_id = checkpointId;
  }
  for (const name of ["interrupt_before", "interrupt_after"] as const) {
    const nodes = options[name];
    if (nodes === undefined || nodes === null) {
      continue;
    }
    if (nodes !== "*" && !(Array.isArray(nodes) && nodes.every((n) => typeof n === "string"))) {
      throw new Error(`run.${name} must be "*" or a list of node names`);
    }
    intent[name] = nodes as string[] | "*";
  }
  const stream = options.stream;
  if (stream !== undefined && stream !== null) {
    if (!Array.isArray(stream) || !stream.every((s) => typeof s === "string")) {
      throw new Error("run.stream must be a list of stream modes");
    }
    intent.stream = stream as string[];
  }
  const tokens = options.tokens;
  if (tokens !== undefined && tokens !== null) {
    if (typeof tokens !== "boolean") {
      throw new Error("run.tokens must be true or false");
    }
    if (!tokens) {
      intent.tokens = false;
    }
  }
  for (const name of ["config", "context"] as const) {
    const value = options[name];
    if (value === undefined || value === null) {
      continue;
    }
    if (!isObject(value)) {
      throw new Error(`run.${name} must be an object`);
    }
    intent[name] = value;
  }
  return intent;
}

/** The journaled input of a run with options. */
export function journaledRun(intent: RunIntent): Record<string, unknown> {
  return { ...intent, [INTENT_KEY]: "run" };
}

/** A journaled run read back; undefined for any other input. */
export function runIntent(journaled: unknown): RunIntent | undefined {
  if (!isObject(journaled) || journaled[INTENT_KEY] !== "run") {
    return undefined;
  }
  const { [INTENT_KEY]: _marker, ...rest } = journaled;
  return { ...(rest as Omit<RunIntent, "input">), input: rest.input ?? null };
}
