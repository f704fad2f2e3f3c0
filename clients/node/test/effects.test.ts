// The effect API's parts that need no service: the key's derivation, the call
// counting per task execution, the settle list a task's writes carry, canonical
// arguments, and a call outside any turn.

import { Annotation, END, START, StateGraph, getConfig } from "@langchain/langgraph";

import { canonical as canonicalJson } from "../src/canonical.js";
import { effect } from "../src/effect/effect.js";
import { executionOf, takeMade } from "../src/effect/executions.js";
import { KEY_PREFIX, callSite, keyOf } from "../src/effect/key.js";

function taskConfig(scratchpad: object, overrides: Record<string, unknown> = {}) {
  return {
    configurable: {
      thread_id: "th",
      turn_id: "t1",
      attempt: 0,
      checkpoint_ns: "work:task-1",
      checkpoint_map: { "": "cp-1" },
      __pregel_task_id: "task-1",
      __pregel_scratchpad: scratchpad,
      ...overrides,
    },
  };
}

describe("the idempotency key", () => {
  it("is stable, prefixed, and differs by every part", () => {
    const parts = { threadId: "th", turnId: "t1", checkpointNs: "ns", taskId: "task", nodeAttempt: 1, name: "charge", callIndex: 0 };
    const key = keyOf(parts);
    expect(key).toBe(keyOf({ ...parts }));
    expect(key.startsWith(KEY_PREFIX)).toBe(true);
    expect(key).toHaveLength(KEY_PREFIX.length + 40);
    const others = [
      keyOf({ ...parts, threadId: "th2" }),
      keyOf({ ...parts, turnId: "t2" }),
      keyOf({ ...parts, checkpointNs: "ns2" }),
      keyOf({ ...parts, taskId: "task2" }),
      keyOf({ ...parts, nodeAttempt: 2 }),
      keyOf({ ...parts, name: "refund" }),
      keyOf({ ...parts, callIndex: 1 }),
    ];
    expect(new Set([key, ...others]).size).toBe(8);
  });

  it("counts a task's calls per effect, again from 0 in a new execution of the task", () => {
    const first = {};
    const a = callSite(taskConfig(first), "charge");
    const b = callSite(taskConfig(first), "charge");
    const c = callSite(taskConfig(first), "notify");
    expect([a?.callIndex, b?.callIndex, c?.callIndex]).toEqual([0, 1, 0]);
    expect(a?.checkpointId).toBe("cp-1");
    // A re-drive prepares the task again (a new scratchpad) on attempt 1: the same
    // logical calls get the same keys.
    const again = callSite(taskConfig({}, { attempt: 1 }), "charge");
    expect(again?.key).toBe(a?.key);
    expect(again?.callIndex).toBe(0);
  });

  it("is new in each try of a RetryPolicy, counted from 0 again, as LangGraph.js tells the try", async () => {
    const seen: { nodeAttempt: number; callIndex: number; key: string }[] = [];
    const State = Annotation.Root({ done: Annotation<boolean> });
    const graph = new StateGraph(State)
      .addNode(
        "pay",
        () => {
          for (const _ of [0, 1]) {
            const site = callSite(getConfig(), "charge");
            seen.push({ nodeAttempt: site?.nodeAttempt ?? 0, callIndex: site?.callIndex ?? -1, key: site?.key ?? "" });
          }
          if (seen.length < 4) {
            throw new Error("the payment service timed out");
          }
          return { done: true };
        },
        { retryPolicy: { maxAttempts: 3, initialInterval: 1, jitter: false, logWarning: false, retryOn: () => true } },
      )
      .addEdge(START, "pay")
      .addEdge("pay", END)
      .compile();
    await graph.invoke({ done: false }, { configurable: { thread_id: "th", turn_id: "t1", attempt: 0 } });
    expect(seen.map(({ nodeAttempt, callIndex }) => [nodeAttempt, callIndex])).toEqual([
      [1, 0],
      [1, 1],
      [2, 0],
      [2, 1],
    ]);
    expect(new Set(seen.map(({ key }) => key)).size).toBe(4);
  });

  it("is not made outside a turn's task", () => {
    expect(callSite({ configurable: { thread_id: "th" } }, "charge")).toBeUndefined();
    expect(callSite(taskConfig({}, { turn_id: undefined }), "charge")).toBeUndefined();
  });
});

describe("the settle list", () => {
  it("is what the task's latest execution made, taken once", () => {
    const execution = executionOf("t2", 0, "task-9", {});
    execution.made.add("fx-b");
    execution.made.add("fx-a");
    expect(takeMade("t2", 0, "task-9")).toEqual(["fx-a", "fx-b"]);
    expect(takeMade("t2", 0, "task-9")).toEqual([]);
  });
});

describe("an effect", () => {
  it("records arguments with sorted keys", () => {
    expect(canonicalJson({ input: { b: 1, a: [{ d: 1, c: 2 }] } })).toBe('{"input":{"a":[{"c":2,"d":1}],"b":1}}');
  });

  it("outside a LangGraph run simply calls its function", async () => {
    const charge = effect("charge", (amount: number, { key }) => ({ amount, key }), { policy: "retry" });
    await expect(charge(5)).resolves.toEqual({ amount: 5, key: "" });
  });

  it("refuses a policy it does not know", () => {
    expect(() => effect("charge", () => 1, { policy: "maybe" as never })).toThrow(/retry", "park" or "fail/);
  });
});
