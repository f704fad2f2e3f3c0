// The langgraph/* methods of a runner (src/runner/graphApi.ts) over a LangGraph.js
// graph with an in-memory checkpointer, and the LangGraph API run options a
// responses/create carries (src/runner/intent.ts parseRun / runIntent).

import { AIMessage, HumanMessage } from "@langchain/core/messages";
import { Annotation, END, MemorySaver, START, StateGraph, interrupt } from "@langchain/langgraph";

import { GraphApi, stateValues, toApiJson } from "../src/runner/graphApi.js";
import { INTENT_KEY, journaledRun, parseRun, runIntent } from "../src/runner/intent.js";
import { RpcError, type Request } from "../src/runner/jsonrpc.js";
import { defaultAssistantId } from "../src/runner/execution.js";

const State = Annotation.Root({
  topic: Annotation<string>(),
  notes: Annotation<string[]>({ reducer: (a, b) => a.concat(b), default: () => [] }),
});

function graph() {
  return new StateGraph(State)
    .addNode("write", (s: typeof State.State) => ({ notes: [`on ${s.topic}`] }))
    .addNode("review", () => ({ notes: [String(interrupt({ question: "ok?" }))] }))
    .addEdge(START, "write")
    .addEdge("write", "review")
    .addEdge("review", END)
    .compile({ checkpointer: new MemorySaver() });
}

const request = (method: string, params: Record<string, unknown>): Request => ({
  id: 1,
  method,
  params,
  metadata: {},
  wantsReply: true,
});

describe("GraphApi", () => {
  it("describes the graph: its nodes, edges and state keys", async () => {
    const api = new GraphApi(graph() as never, "notes");
    const { result } = await api.describe(request("langgraph/describe", {}));
    const described = result as { graph_id: string; graph: { nodes: Array<{ id: string }> }; schemas: Record<string, any> };
    expect(described.graph_id).toBe("notes");
    expect(described.graph.nodes.map((n) => n.id)).toEqual(["__start__", "write", "review", "__end__"]);
    expect(Object.keys(described.schemas.state_schema.properties)).toEqual(["topic", "notes"]);
    await expect(api.describe(request("langgraph/describe", { xray: "deep" }))).rejects.toThrow(RpcError);
  });

  it("reads a thread's state and history, with its interrupt, and writes its state", async () => {
    const compiled = graph();
    const api = new GraphApi(compiled as never, "notes");
    const empty = (await api.state(request("langgraph/state", { thread_id: "none" }))).result as Record<string, unknown>;
    expect(empty.checkpoint_id).toBeNull();
    expect(empty.values).toEqual({});

    await compiled.invoke({ topic: "tea" }, { configurable: { thread_id: "t" } });
    const state = (await api.state(request("langgraph/state", { thread_id: "t" }))).result as Record<string, any>;
    expect(state.values).toEqual({ topic: "tea", notes: ["on tea"] });
    expect(state.next).toEqual(["review"]);
    expect(state.interrupts.map((i: { value: unknown }) => i.value)).toEqual([{ question: "ok?" }]);
    expect(state.tasks[0].name).toBe("review");

    const history = (await api.history(request("langgraph/history", { thread_id: "t", limit: 2 }))).result as Array<
      Record<string, any>
    >;
    expect(history).toHaveLength(2);
    expect(history[0].checkpoint_id).toBe(state.checkpoint_id);
    expect(history[1].checkpoint_id).toBe(state.parent_checkpoint_id);
    await expect(api.history(request("langgraph/history", { thread_id: "t", limit: 0 }))).rejects.toThrow(
      "limit must be a whole number from 1 to 1000",
    );

    const written = (
      await api.updateState(request("langgraph/updateState", { thread_id: "t", values: { notes: ["edited"] }, as_node: "write" }))
    ).result as { checkpoint: { checkpoint_id: string } };
    expect(written.checkpoint.checkpoint_id).not.toBe(state.checkpoint_id);
    const edited = (await api.state(request("langgraph/state", { thread_id: "t" }))).result as Record<string, any>;
    expect(edited.values.notes).toEqual(["on tea", "edited"]);
    await expect(api.state(request("langgraph/state", {}))).rejects.toThrow("thread_id must be a non-empty string");
  });
});

describe("LangGraph API JSON", () => {
  it("writes messages as LangGraph's server does, with their type and every field", () => {
    const json = toApiJson({ messages: [new HumanMessage({ content: "hi", id: "h1" }), new AIMessage("yes")] }) as {
      messages: Array<Record<string, unknown>>;
    };
    expect(json.messages[0]).toMatchObject({ type: "human", content: "hi", id: "h1", additional_kwargs: {} });
    expect(json.messages[1]).toMatchObject({ type: "ai", content: "yes", tool_calls: [] });
    expect(json.messages[1]).not.toHaveProperty("lc");
  });

  it("shows a reducer's default for a channel not yet written", () => {
    const compiled = graph();
    expect(stateValues(compiled as never, { topic: "x" })).toEqual({ topic: "x", notes: [] });
  });

  it("names the default assistant as the service and the Python bridge do (uuid5)", () => {
    // uuid.uuid5(uuid.UUID("6ba7b821-9dad-11d1-80b4-00c04fd430c8"), "agent")
    expect(defaultAssistantId("agent")).toBe("fe096781-5601-53d2-b2f6-0d3403f7e9ca");
  });
});

describe("run options", () => {
  it("journals a run's options with its input and reads them back", () => {
    const intent = parseRun({ command: { resume: "yes" }, config: { configurable: { user: "a" } } }, null);
    const journaled = journaledRun(intent);
    expect(journaled[INTENT_KEY]).toBe("run");
    expect(runIntent(JSON.parse(JSON.stringify(journaled)))).toEqual(intent);
    expect(runIntent({ topic: "tea" })).toBeUndefined();
  });

  it("refuses what it does not know, and input beside a command", () => {
    expect(() => parseRun({ webhook: "x" }, null)).toThrow("run: unknown option(s) webhook");
    expect(() => parseRun({ command: { resume: 1 } }, { topic: "x" })).toThrow("send input or a command, not both");
    expect(() => parseRun({ interrupt_before: "write" }, null)).toThrow('run.interrupt_before must be "*"');
    expect(() => parseRun({ tokens: "no" }, null)).toThrow("run.tokens must be true or false");
  });

  it("takes a run's tokens: false (no messages mode, decision 770); true is the default", () => {
    const intent = parseRun({ tokens: false }, { topic: "x" });
    expect(intent.tokens).toBe(false);
    expect(runIntent(JSON.parse(JSON.stringify(journaledRun(intent))))?.tokens).toBe(false);
    expect(parseRun({ tokens: true }, null).tokens).toBeUndefined();
  });
});
