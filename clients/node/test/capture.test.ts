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
