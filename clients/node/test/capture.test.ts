// EventCapture on a real LangGraph.js graph (in memory, no service): which events a
// run produces, in order, before anything is appended anywhere.

import { tool } from "@langchain/core/tools";
import { Annotation, END, MemorySaver, START, StateGraph } from "@langchain/langgraph";
import { z } from "zod";

import type { TurnkeeperClient } from "../src/client.js";
import { EventCapture } from "../src/runner/capture.js";
import { EventLog, emitEvent, register } from "../src/runner/events.js";

const State = Annotation.Root({
  log: Annotation<string[]>({ reducer: (a, b) => a.concat(b), default: () => [] }),
});

const lookup = tool(async ({ city }: { city: string }) => `sunny in ${city}`, {
  name: "lookup",
  description: "the weather",
  schema: z.object({ city: z.string() }),
});

const broken = tool(
  async (): Promise<string> => {
    throw new Error("no network");
  },
  { name: "broken", description: "always fails", schema: z.object({}) },
);

it("turns nodes, tool calls and emitted events into the runner's events, in order", async () => {
  const graph = new StateGraph(State)
    .addNode("plan", (_state, config) => {
      emitEvent(config, "token", { node: "plan", text: "thinking" });
      return { log: ["planned"] };
    })
    .addNode("act", async (_state, config) => {
      const weather = await lookup.invoke({ city: "Oslo" }, config);
      const failure = await broken.invoke({}, config).catch((error: Error) => error.message);
      return { log: [String(weather), String(failure)] };
    })
    .addEdge(START, "plan")
    .addEdge("plan", "act")
    .addEdge("act", END)
    .compile({ checkpointer: new MemorySaver() });

  // Nothing is appended: emit() only buffers, and close() hands the buffer back.
  const events = new EventLog(undefined as unknown as TurnkeeperClient, "t1", 0, 0);
  const unregister = register(events);
  const configurable = { thread_id: "th", turn_id: "t1", attempt: 0 };
  await graph.invoke({ log: [] }, { configurable, callbacks: [new EventCapture(events)] });
  unregister();
  const seen = (await events.close()).map((e) => [Number(e.seq), e.type, JSON.parse(e.dataJson)]);

  expect(seen).toEqual([
    [1, "token", { node: "plan", text: "thinking" }],
    [2, "step", { node: "plan", step: 1, update: { log: ["planned"] } }],
    [3, "tool_call_start", { node: "act", name: "lookup", tool_call_id: null, input: { city: "Oslo" } }],
    [4, "tool_call_end", { node: "act", name: "lookup", tool_call_id: null, output: "sunny in Oslo" }],
    [5, "tool_call_start", { node: "act", name: "broken", tool_call_id: null, input: {} }],
    [6, "tool_call_end", { node: "act", name: "broken", tool_call_id: null, error: "Error: no network" }],
    [7, "step", { node: "act", step: 2, update: { log: ["sunny in Oslo", "no network"] } }],
  ]);
});

it("for the LangGraph API, streams a model's invoke and names returned messages as LangGraph.js's messages mode", async () => {
  const { BaseChatModel } = await import("@langchain/core/language_models/chat_models");
  const { AIMessage, AIMessageChunk, ToolMessage } = await import("@langchain/core/messages");
  const { ChatGenerationChunk } = await import("@langchain/core/outputs");
  const { MessagesAnnotation } = await import("@langchain/langgraph");
  // A model as providers write them: it reports each chunk to its callbacks.
  class TwoWords extends BaseChatModel {
    _llmType(): string {
      return "two-words";
    }
    async _generate() {
      return { generations: [{ message: new AIMessage("two words"), text: "two words" }] };
    }
    override async *_streamResponseChunks(_m: unknown, _o: unknown, runManager?: { handleLLMNewToken: Function }) {
      for (const text of ["two", " words"]) {
        const chunk = new ChatGenerationChunk({ message: new AIMessageChunk({ content: text }), text });
        await runManager?.handleLLMNewToken(text, undefined, undefined, undefined, undefined, { chunk });
        yield chunk;
      }
    }
  }
  const model = new TwoWords({});
  const graph = new StateGraph(MessagesAnnotation)
    .addNode("reply", async (state, config) => ({
      // invoke, not stream: the capture's lc_prefer_streaming makes it stream
      messages: [await model.invoke(state.messages, config), new ToolMessage({ content: "5", tool_call_id: "c1" })],
    }))
    .addEdge(START, "reply")
    .addEdge("reply", END)
    .compile({ checkpointer: new MemorySaver() });

  const events = new EventLog(undefined as unknown as TurnkeeperClient, "t2", 0, 0);
  const configurable = { thread_id: "th2", turn_id: "t2", attempt: 0 };
  const out = await graph.invoke(
    { messages: [{ role: "user", content: "hi", id: "h1" }] },
    { configurable, callbacks: [new EventCapture(events, true)] },
  );
  const seen = (await events.close()).map((e) => [e.type, JSON.parse(e.dataJson)]);

  const tokens = seen.filter(([type]) => type === "token").map(([, data]) => data);
  expect(tokens.map((t) => t.text).join("")).toBe("two words");
  expect(tokens.length).toBeGreaterThan(1);
  // The chunk whole, under the message's id; the call's metadata on its first chunk only.
  expect(tokens[0].chunk).toMatchObject({ type: "ai", content: tokens[0].text, id: tokens[0].id });
  expect(tokens[0].metadata).toMatchObject({ langgraph_node: "reply", langgraph_step: 1 });
  expect(tokens[0].metadata.tags).toBeDefined();
  expect(tokens.slice(1).every((t) => t.metadata === undefined)).toBe(true);

  const [, step] = seen.find(([type]) => type === "step") ?? [];
  expect(step.metadata).toMatchObject({ langgraph_node: "reply", name: "reply" });
  const [reply, result] = step.update.messages;
  expect(reply.id).toBe(tokens[0].id);
  // A message returned without an id: named as LangGraph.js's messages mode names it,
  // and the state keeps that id. No `name` or `id` the message was not given.
  expect(result.id).toMatch(/^run-.+-tool-c1$/);
  expect(out.messages[2].id).toBe(result.id);
  expect(reply).not.toHaveProperty("name");
});

it("journals a run's custom parts as nodes write them, and what its captures ask for, in the graph's order", async () => {
  const { withRunStream } = await import("../src/runner/execution.js");
  const Inner = Annotation.Root({ steps: Annotation<string[]>({ reducer: (a, b) => a.concat(b), default: () => [] }) });
  const inner = new StateGraph(Inner)
    .addNode("inner_a", (_state, config) => {
      config.writer?.({ from: "inner" });
      return { steps: ["inner_a"] };
    })
    .addEdge(START, "inner_a")
    .addEdge("inner_a", END)
    .compile();
  const Outer = Annotation.Root({
    log: Annotation<string[]>({ reducer: (a, b) => a.concat(b), default: () => [] }),
    steps: Annotation<string[]>({ reducer: (a, b) => a.concat(b), default: () => [] }),
  });
  const graph = new StateGraph(Outer)
    .addNode("count", (_state, config) => {
      for (let n = 1; n <= 2; n += 1) config.writer?.({ progress: n });
      return { log: ["count"] };
    })
    .addNode("inner", inner)
    .addEdge(START, "count")
    .addEdge("count", "inner")
    .addEdge("inner", END)
    .compile({ checkpointer: new MemorySaver() });

  const events = new EventLog(undefined as unknown as TurnkeeperClient, "t3", 0, 0);
  const config = withRunStream(
    { configurable: { thread_id: "th3", turn_id: "t3", attempt: 0 }, callbacks: [new EventCapture(events, true)] },
    events,
    ["tasks", "subgraphs"],
  );
  // stream() read to its end without looking: what is journaled is the capture's.
  for await (const _chunk of await graph.stream({ log: [] }, { ...config, streamMode: ["values", "updates"] })) {
    // nothing
  }
  const seen = (await events.close()).map((e) => [e.type, JSON.parse(e.dataJson)]);
  const named = seen.map(([type, data]) => (type === "stream" ? `${data.mode}|${data.ns.length}` : type));

  // The custom parts before their node's step, the subgraph's under its namespace.
  expect(named.indexOf("custom")).toBeLessThan(named.indexOf("step"));
  expect(seen.filter(([type]) => type === "custom").map(([, d]) => d.data)).toEqual([{ progress: 1 }, { progress: 2 }]);
  const nested = seen.filter(([type, d]) => type === "stream" && d.ns.length > 0);
  expect(nested.map(([, d]) => d.mode)).toEqual(expect.arrayContaining(["custom", "values", "updates"]));
  expect(nested.find(([, d]) => d.mode === "custom")?.[1].data).toEqual({ from: "inner" });
  // The root's tasks, as LangGraph's server sends them; no checkpoints or debug (not asked).
  const tasks = seen.filter(([type, d]) => type === "stream" && d.ns.length === 0).map(([, d]) => d.mode);
  expect(new Set(tasks)).toEqual(new Set(["tasks"]));
});
