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
// `token` {node, text} for each streamed chat-model chunk; for the LangGraph API,
// `step` also carries the node's `metadata` and `token` its message's `id`, the
// chunk whole (`chunk`) and, on a model call's first chunk, the call's `metadata`,
// as LangGraph.js's `messages` stream mode gives them; `tool_call_start`
// {node, name, tool_call_id, input} and `tool_call_end` {node, name, tool_call_id,
// output | error} around each tool run; what a node emits with
// emitEvent(); then `interrupt` {id, value}, `final` {output} or `error`
// {type, message} from the runner.

import { BaseCallbackHandler } from "@langchain/core/callbacks/base";
import type { Serialized } from "@langchain/core/load/serializable";
import { isAIMessageChunk, isBaseMessage, isToolMessage } from "@langchain/core/messages";
import { isCommand, isGraphBubbleUp } from "@langchain/langgraph";

import type { EventLog } from "./events.js";
import { toApiJson } from "./graphApi.js";

export class EventCapture extends BaseCallbackHandler {
  name = "turnkeeper-event-capture";
  #events: EventLog;
  #root: string | undefined;
  #nodes = new Map<string, [string, number, Record<string, unknown>]>();
  #models = new Map<string, { node: string; metadata: Record<string, unknown> | undefined }>();
  #tools = new Map<string, { node: string; name: string; tool_call_id: string | null }>();

  #apiShapes: boolean;
  #tokens: boolean;
  /** For the LangGraph API: a chat model's `invoke` streams (its tokens reach
   * handleLLMNewToken), as under LangGraph.js's own `messages` stream mode, which
   * LangGraph's servers run every graph with. @langchain/core reads this field. */
  lc_prefer_streaming: boolean;

  /** @param apiShapes for the LangGraph API (a runner with langgraphApi): tokens
   * carry their message's `id`, the chunk whole and the model call's metadata, a
   * step its node's metadata, and a step's update is JSON as LangGraph's server
   * writes it (messages whole: graphApi.ts toApiJson); a message a node returns
   * without an id gets the one LangGraph.js's `messages` mode gives it, whatever
   * modes the run asked for (a later join_stream may ask for `messages`).
   * @param tokens false for a run that asked for no `messages` mode: its models
   * are not made to stream and no `token` event is journaled (decision 770). */
  constructor(events: EventLog, apiShapes = false, tokens = true) {
    super({ _awaitHandler: true });
    this.awaitHandlers = true;
    this.#events = events;
    this.#apiShapes = apiShapes;
    this.#tokens = tokens;
    this.lc_prefer_streaming = apiShapes && tokens;
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
      this.#nodes.set(runId, [node, Number(metadata?.langgraph_step ?? 0), { tags, name: runName, ...metadata }]);
    }
  }

  override handleChainEnd(outputs: unknown, runId: string): void {
    const node = this.#nodes.get(runId);
    if (node !== undefined) {
      this.#nodes.delete(runId);
      if (!this.#apiShapes) {
        this.#events.emit("step", { node: node[0], step: node[1], update: outputs });
        return;
      }
      // Before the writes are applied (handlers are awaited): the state keeps them.
      nameMessages(outputs, runId);
      this.#events.emit("step", { node: node[0], step: node[1], update: toApiJson(outputs), metadata: toApiJson(node[2]) });
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
    tags?: string[],
    metadata?: Record<string, unknown>,
    runName?: string,
  ): void {
    // The call's metadata as LangGraph.js's messages mode sends it: its tags and
    // name, then what LangGraph and the model put in its metadata.
    const described = this.#apiShapes ? { tags, name: runName, ...metadata } : undefined;
    this.#models.set(runId, { node: String(metadata?.langgraph_node ?? ""), metadata: described });
  }

  override handleLLMNewToken(
    token: string,
    _idx: unknown,
    runId: string,
    _parentRunId?: string,
    _tags?: string[],
    fields?: { chunk?: unknown },
  ): void {
    if (!this.#tokens) {
      return;
    }
    const chunk = fields?.chunk as { message?: { id?: unknown } } | undefined;
    const message = chunk?.message;
    // A chunk with no text may still say something (a tool call's chunk): for the
    // LangGraph API it is a part as LangGraph.js's messages mode sends it.
    const whole = this.#apiShapes && isAIMessageChunk(message as never);
    if (token || whole) {
      const model = this.#models.get(runId);
      const data: Record<string, unknown> = { node: model?.node ?? "", text: token };
      // A chunk without an id of its own is given `run-<the model's run id>` by
      // LangChain.js after this callback, and so is the message the node returns:
      // the id the service matches the streamed message with (decision 313).
      const id = message?.id ?? `run-${runId}`;
      if (this.#apiShapes && typeof id === "string") {
        data.id = id;
        if (whole) {
          data.chunk = { ...(toApiJson(message) as Record<string, unknown>), id };
        }
        if (model?.metadata !== undefined) {
          // Once per call: the service gives the call's later chunks the same.
          data.metadata = toApiJson(model.metadata);
          model.metadata = undefined;
        }
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

/** Ids for the messages a node returned without one, as LangGraph.js's `messages`
 * stream mode gives them (its StreamMessagesHandler): `run-<node run>-tool-<call id>`
 * for a tool's result, `run-<node run>-out-<n>` for the n-th other message. */
function nameMessages(outputs: unknown, runId: string): void {
  let index = 0;
  const name = (value: unknown): void => {
    if (!isBaseMessage(value)) {
      return;
    }
    if (value.id === undefined) {
      const id = isToolMessage(value) ? `run-${runId}-tool-${value.tool_call_id}` : `run-${runId}-out-${index}`;
      value.id = id;
      (value.lc_kwargs as Record<string, unknown>).id = id;
    }
    index += 1;
  };
  const walk = (output: unknown): void => {
    if (isCommand(output)) {
      walk(output.update);
    } else if (isBaseMessage(output)) {
      name(output);
    } else if (Array.isArray(output)) {
      const commands = output.some(isCommand);
      for (const value of output) {
        if (commands) {
          walk(value);
        } else {
          name(value);
        }
      }
    } else if (output !== null && typeof output === "object") {
      for (const value of Object.values(output)) {
        if (Array.isArray(value)) {
          walk(value);
        } else {
          name(value);
        }
      }
    }
  };
  walk(outputs);
}
