// The TypeScript client computes what the cross-language vectors say
// (vectors/README.md): the files in vectors/ are written once from the Python client
// (scripts/gen_vectors.py) and read here, case by case; tests/packaging/test_vectors.py
// reads the same files for the Python client. Nothing here rewrites them.

import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

import type { RunnableConfig } from "@langchain/core/runnables";

import { callSite } from "../src/effect/key.js";

interface Case<I, E> {
  name: string;
  input: I;
  expected: E;
}

function vectors<I, E>(file: string): Case<I, E>[] {
  const path = fileURLToPath(new URL(`../../../vectors/${file}`, import.meta.url));
  return (JSON.parse(readFileSync(path, "utf8")) as { cases: Case<I, E>[] }).cases;
}

interface EffectCall {
  thread_id: string;
  turn_id: string;
  checkpoint_ns: string;
  task_id: string;
  node_attempt: number;
  name: string;
  call_index: number;
}

describe("effect keys (vectors/effect_keys.json)", () => {
  it.each(vectors<EffectCall, { key: string }>("effect_keys.json"))("$name", ({ input, expected }) => {
    // The config LangGraph.js gives the running task: the turn (TurnRunner's), the
    // task, its namespace and the node's try (executionInfo).
    const config = {
      configurable: {
        thread_id: input.thread_id,
        turn_id: input.turn_id,
        attempt: 0,
        checkpoint_ns: input.checkpoint_ns,
        __pregel_task_id: input.task_id,
        __pregel_scratchpad: {},
      },
      executionInfo: { nodeAttempt: input.node_attempt },
    } as RunnableConfig;
    // The call at position call_index is the task's (call_index + 1)th call of it.
    let site = callSite(config, input.name);
    for (let made = 0; made < input.call_index; made++) {
      site = callSite(config, input.name);
    }
    expect(site?.callIndex).toBe(input.call_index);
    expect(site?.key).toBe(expected.key);
  });
});
