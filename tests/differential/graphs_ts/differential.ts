// The differential suite's graphs written in LangGraph.js (tests/differential): the
// graphs of ../graphs/differential.py, node for node, so the same scenarios.json runs
// over them. Served by LangGraph.js's own dev server (`langgraph-cli dev`, the
// reference; ../js_reference) and by `turnkeeper agent langgraph.json` (the
// TypeScript runner, clients/node).
//
// The chat model is scripted: its reply is a function of the conversation alone,
// streamed one chunk per word with no delay.

import type { CallbackManagerForLLMRun } from "@langchain/core/callbacks/manager";
import { BaseChatModel } from "@langchain/core/language_models/chat_models";
import {
  AIMessage,
  AIMessageChunk,
  type BaseMessage,
  ToolMessage,
} from "@langchain/core/messages";
import { ChatGenerationChunk, type ChatResult } from "@langchain/core/outputs";
import { tool } from "@langchain/core/tools";
import {
  Annotation,
  END,
  type LangGraphRunnableConfig,
  MessagesAnnotation,
  START,
  Send,
  StateGraph,
  interrupt,
} from "@langchain/langgraph";
import { ToolNode } from "@langchain/langgraph/prebuilt";
import { z } from "zod";

/** Answers by rule: a question about a sum calls the `add` tool, a tool's result is
 * reported, anything else is greeted. Streams one chunk per word. */
class ScriptedChat extends BaseChatModel {
  _llmType(): string {
    return "scripted-chat";
  }

  reply(messages: BaseMessage[]): AIMessage {
    const last = messages[messages.length - 1];
    if (ToolMessage.isInstance(last)) {
      return new AIMessage({ content: `The sum is ${String(last.content)}.` });
    }
    if (String(last?.content ?? "").includes("sum")) {
      const call = { name: "add", args: { a: 2, b: 3 }, id: "call-add-1", type: "tool_call" as const };
      return new AIMessage({ content: "", tool_calls: [call] });
    }
    const turn = messages.filter((m) => m.getType() === "human").length;
    return new AIMessage({ content: `Hello, this is reply number ${turn}.` });
  }

  async _generate(messages: BaseMessage[]): Promise<ChatResult> {
    const message = this.reply(messages);
    return { generations: [{ message, text: String(message.content) }] };
  }

  async *_streamResponseChunks(
    messages: BaseMessage[],
    _options: this["ParsedCallOptions"],
    runManager?: CallbackManagerForLLMRun,
  ): AsyncGenerator<ChatGenerationChunk> {
    const reply = this.reply(messages);
    const content = String(reply.content);
    const words = content ? content.split(" ") : [];
    const chunks = words.map((w, i) => new AIMessageChunk({ content: i === 0 ? w : ` ${w}` }));
    for (const call of reply.tool_calls ?? []) {
      chunks.push(
        new AIMessageChunk({
          content: "",
          tool_call_chunks: [
            { name: call.name, args: JSON.stringify(call.args), id: call.id, index: 0, type: "tool_call_chunk" },
          ],
        }),
      );
    }
    for (const message of chunks) {
      const chunk = new ChatGenerationChunk({ message, text: String(message.content) });
      await runManager?.handleLLMNewToken(chunk.text, undefined, undefined, undefined, undefined, { chunk });
      yield chunk;
    }
  }
}

const MODEL = new ScriptedChat({});

// -- chat: one node, a streamed reply -------------------------------------------------

export const chat = new StateGraph(MessagesAnnotation)
  .addNode("respond", async (state: typeof MessagesAnnotation.State, config: LangGraphRunnableConfig) => ({
    messages: [await MODEL.invoke(state.messages, config)],
  }))
  .addEdge(START, "respond")
  .addEdge("respond", END)
  .compile();

// -- tools: the model calls a tool, then reports its result ---------------------------

const add = tool(async ({ a, b }: { a: number; b: number }) => a + b, {
  name: "add",
  description: "Add two integers.",
  schema: z.object({ a: z.number().int(), b: z.number().int() }),
});

function route(state: typeof MessagesAnnotation.State): "tools" | typeof END {
  const last = state.messages[state.messages.length - 1];
  return AIMessage.isInstance(last) && (last.tool_calls?.length ?? 0) > 0 ? "tools" : END;
}

export const tools = new StateGraph(MessagesAnnotation)
  .addNode("agent", async (state: typeof MessagesAnnotation.State, config: LangGraphRunnableConfig) => ({
    messages: [await MODEL.invoke(state.messages, config)],
  }))
  .addNode("tools", new ToolNode([add]))
  .addEdge(START, "agent")
  .addConditionalEdges("agent", route, ["tools", END])
  .addEdge("tools", "agent")
  .compile();

// -- interrupt: a question to a person, then the answer's effect ----------------------
// (The first node is `write`: LangGraph.js refuses a node named as a state key, as
// `counter` below.)

const Approval = Annotation.Root({
  topic: Annotation<string>(),
  draft: Annotation<string>(),
  verdict: Annotation<string>(),
});

export const approval = new StateGraph(Approval)
  .addNode("write", (state: typeof Approval.State) => ({ draft: `a draft about ${state.topic ?? "nothing"}` }))
  .addNode("review", (state: typeof Approval.State) => {
    const answer = interrupt({ question: "approve the draft?", draft: state.draft });
    return { verdict: answer === "yes" ? "approved" : "rejected" };
  })
  .addEdge(START, "write")
  .addEdge("write", "review")
  .addEdge("review", END)
  .compile();

// -- subgraph: a compiled graph as a node ---------------------------------------------

const concat = (a: string[], b: string[]): string[] => a.concat(b);

const Inner = Annotation.Root({
  steps: Annotation<string[]>({ reducer: concat, default: () => [] }),
});

const Outer = Annotation.Root({
  log: Annotation<string[]>({ reducer: concat, default: () => [] }),
  steps: Annotation<string[]>({ reducer: concat, default: () => [] }),
});

const inner = new StateGraph(Inner)
  .addNode("inner_a", () => ({ steps: ["inner_a"] }))
  .addNode("inner_b", () => ({ steps: ["inner_b"] }))
  .addEdge(START, "inner_a")
  .addEdge("inner_a", "inner_b")
  .addEdge("inner_b", END)
  .compile();

export const nested = new StateGraph(Outer)
  .addNode("before", () => ({ log: ["before"] }))
  .addNode("inner", inner)
  .addNode("after", () => ({ log: ["after"] }))
  .addEdge(START, "before")
  .addEdge("before", "inner")
  .addEdge("inner", "after")
  .addEdge("after", END)
  .compile();

// -- subgraph-chat: the model streams inside a subgraph --------------------------------

export const nested_chat = new StateGraph(MessagesAnnotation)
  .addNode("talk", chat)
  .addEdge(START, "talk")
  .addEdge("talk", END)
  .compile();

// -- fanout: Send one task per item, results gathered by a reducer --------------------

const Fan = Annotation.Root({
  items: Annotation<string[]>(),
  results: Annotation<string[]>({ reducer: concat, default: () => [] }),
  summary: Annotation<string>(),
});

export const fanout = new StateGraph(Fan)
  .addNode("split", () => ({}))
  .addNode("work", (state: { item: string }) => ({ results: [state.item.toUpperCase()] }))
  .addNode("gather", (state: typeof Fan.State) => ({ summary: [...(state.results ?? [])].sort().join(",") }))
  .addEdge(START, "split")
  .addConditionalEdges("split", (state: typeof Fan.State) => (state.items ?? []).map((item) => new Send("work", { item })), ["work"])
  .addEdge("work", "gather")
  .addEdge("gather", END)
  .compile();

// -- custom: a node reports progress on the `custom` stream ---------------------------

const Count = Annotation.Root({ count: Annotation<number>() });

export const custom = new StateGraph(Count)
  .addNode("counter", (_state: typeof Count.State, config: LangGraphRunnableConfig) => {
    for (let n = 1; n <= 3; n += 1) config.writer?.({ progress: n, of: 3 });
    return { count: 3 };
  })
  .addEdge(START, "counter")
  .addEdge("counter", END)
  .compile();

// -- context: what a run's `context` and `config` say reaches the node ----------------

const Who = Annotation.Root({ user: Annotation<string>() });

const Seen = Annotation.Root({
  user: Annotation<string>(),
  model: Annotation<string>(),
});

export const context = new StateGraph(Seen, Who)
  .addNode("read", (_state: typeof Seen.State, config: LangGraphRunnableConfig) => {
    // Writes what the run was given, and nothing of what it was not.
    const seen: Partial<typeof Seen.State> = {};
    const given = (config.context ?? {}) as { user?: string };
    if (given.user) seen.user = given.user;
    const model = config.configurable?.model as string | undefined;
    if (model) seen.model = model;
    return seen;
  })
  .addEdge(START, "read")
  .addEdge("read", END)
  .compile();
