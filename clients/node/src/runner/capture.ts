// LangChain callbacks of one graph run, as events in an EventLog.
//
// Captured when the graph emits them, not when a consumer of stream() reads them:
// with durability "sync" LangGraph stores a step's checkpoint before stream() has
// handed out that step's chunks, so events made from chunks would be appended
// after the checkpoint, and a rewind to it would drop them for good. The handler
// is awaited (awaitHandlers), so an event is in the log before the node's writes
// are saved, and the BoundarySaver flushes the log first.
//
// Event types: `step` {node, step, update} when a node of the graph finishes;
// `token` {node, text} for each streamed chat-model chunk; `tool_call_start`
// {node, name, tool_call_id, input} and `tool_call_end` {node, name, tool_call_id,
// output | error} around each tool run; what a node emits with
// emitEvent(); then `interrupt` {id, value}, `final` {output} or `error`
// {type, message} from the runner.

import { BaseCallbackHandler } from "@langchain/core/callbacks/base";
import type { Serialized } from "@langchain/core/load/serializable";
import { isGraphBubbleUp } from "@langchain/langgraph";

import type { EventLog } from "./events.js";
import { toApiJson } from "./graphApi.js";

export class EventCapture extends BaseCallbackHandler {
  name = "turnkeeper-event-capture";
  #events: EventLog;
  #root: string | undefined;
  #nodes = new Map<string, [string, number]>();
  #models = new Map<string, string>();
  #tools = new Map<string, { node: string; name: string; tool_call_id: string | null }>();

  #apiShapes: boolean;

  /** @param apiShapes for the LangGraph API (a runner with langgraphApi): tokens
   * carry their message's `id`, and a step's update is JSON as LangGraph's server
   * writes it (messages whole: graphApi.ts toApiJson). */
  constructor(events: EventLog, apiShapes = false) {
    super({ _awaitHandler: true });
    this.awaitHandlers = true;
    this.#events = events;
    this.#apiShapes = apiShapes;
  }

  // The arguments in the order @langchain/core's CallbackManager passes them
  // (runId, parentRunId, tags, metadata, runType, runName), which is not the order
  // its published typings name them in.
  override handleChainStart(
    _chain: Serialized,
    _inputs: unknown,
    runId: string,
    parentRunId?: string,
    tags?: string[],
    metadata?: Record<string, unknown>,
    _runType?: string,
    runName?: string,
  ): void {
    if (parentRunId === undefined) {
      this.#root = runId;
      return;
    }
    const node = metadata?.langgraph_node;
    // Only the graph's own nodes are steps; chains inside a node (and the nodes of
    // a subgraph) are part of that node's step, and LangGraph's hidden input node
    // (__start__) is none.
    const hidden = tags?.includes("langsmith:hidden") ?? false;
    if (parentRunId === this.#root && typeof node === "string" && runName === node && !hidden) {
      this.#nodes.set(runId, [node, Number(metadata?.langgraph_step ?? 0)]);
    }
  }

  override handleChainEnd(outputs: unknown, runId: string): void {
    const node = this.#nodes.get(runId);
    if (node !== undefined) {
      this.#nodes.delete(runId);
      this.#events.emit("step", { node: node[0], step: node[1], update: this.#apiShapes ? toApiJson(outputs) : outputs });
    }
  }

  override handleChainError(_error: Error, runId: string): void {
    // An interrupted or failed node is not a finished step: the runner reports
    // the interrupt or the error once, for the whole run.
    this.#nodes.delete(runId);
  }

  override handleChatModelStart(
    _llm: Serialized,
    _messages: unknown,
    runId: string,
    _parentRunId?: string,
    _extraParams?: Record<string, unknown>,
    _tags?: string[],
    metadata?: Record<string, unknown>,
  ): void {
    this.#models.set(runId, String(metadata?.langgraph_node ?? ""));
  }

  override handleLLMNewToken(
    token: string,
    _idx: unknown,
    runId: string,
    _parentRunId?: string,
    _tags?: string[],
    fields?: { chunk?: unknown },
  ): void {
    if (token) {
      const data: Record<string, unknown> = { node: this.#models.get(runId) ?? "", text: token };
      const chunk = fields?.chunk as { message?: { id?: unknown } } | undefined;
      // A chunk without an id of its own is given `run-<the model's run id>` by
      // LangChain.js after this callback, and so is the message the node returns:
      // the id the service matches the streamed message with (decision 313).
      const id = chunk?.message?.id ?? `run-${runId}`;
      if (this.#apiShapes && typeof id === "string") {
        data.id = id;
      }
      this.#events.emit("token", data);
    }
  }

  override handleLLMEnd(_output: unknown, runId: string): void {
    this.#models.delete(runId);
  }

  override handleLLMError(_error: unknown, runId: string): void {
    this.#models.delete(runId);
  }

  override handleToolStart(
    tool: Serialized,
    input: string,
    runId: string,
    _parentRunId?: string,
    _tags?: string[],
    metadata?: Record<string, unknown>,
    runName?: string,
    toolCallId?: string,
  ): void {
    const call = {
      node: String(metadata?.langgraph_node ?? ""),
      name: runName ?? String((tool as { name?: unknown }).name ?? ""),
      tool_call_id: toolCallId ?? null,
    };
    this.#tools.set(runId, call);
    let parsed: unknown = input;
    try {
      parsed = JSON.parse(input);
    } catch {
      // a plain string input stays a string
    }
    this.#events.emit("tool_call_start", { ...call, input: parsed });
  }

  override handleToolEnd(output: unknown, runId: string): void {
    const call = this.#tools.get(runId);
    if (call !== undefined) {
      this.#tools.delete(runId);
      const content = output !== null && typeof output === "object" && "content" in output ? output.content : output;
      this.#events.emit("tool_call_end", { ...call, output: content });
    }
  }

  override handleToolError(error: unknown, runId: string): void {
    const call = this.#tools.get(runId);
    this.#tools.delete(runId);
    // An interrupt() inside a tool is not a failed call: the runner reports it.
    if (call !== undefined && !isGraphBubbleUp(error)) {
      const err = error instanceof Error ? error : new Error(String(error));
      this.#events.emit("tool_call_end", { ...call, error: `${err.name}: ${err.message}` });
    }
  }
}
