// What a runner answers about its graph, for the service's LangGraph API
// (docs/langgraph-api.md), as the Python bridge's turnkeeper.agent.bridge._graph_api
// answers it: the graph's description, and a thread's state and history read and
// written through the graph itself (LangGraph.js's getGraphAsync, getState,
// getStateHistory and updateState), which alone knows its channels, its next nodes
// and its pending tasks.
//
// langgraph/describe     {xray?}   {assistant_id, graph_id, name, graph: {nodes, edges}, schemas}
// langgraph/state        {thread_id, checkpoint_id?, checkpoint_ns?, subgraphs?}
// langgraph/history      {thread_id, limit?, before?, metadata?, checkpoint_id?}
// langgraph/updateState  {thread_id, values, as_node?, checkpoint_id?}  {checkpoint}
//
// Values are JSON the way LangGraph's server writes them: a message is a plain
// object with its `type` and every field (`toApiJson`), not LangChain's
// serialized constructor form.

import type { RunnableConfig } from "@langchain/core/runnables";

import { type Reply, type Request, invalidParams } from "./jsonrpc.js";

export const DESCRIBE = "langgraph/describe";
export const STATE = "langgraph/state";
export const HISTORY = "langgraph/history";
export const UPDATE_STATE = "langgraph/updateState";
export const GRAPH_METHODS = [DESCRIBE, STATE, HISTORY, UPDATE_STATE] as const;
export const MAX_HISTORY = 1000;

type Json = unknown;

interface Snapshot {
  values: unknown;
  next: ReadonlyArray<string>;
  config?: RunnableConfig;
  parentConfig?: RunnableConfig;
  metadata?: unknown;
  createdAt?: string;
  tasks: ReadonlyArray<{
    id: string;
    name: string;
    path?: unknown;
    error?: unknown;
    interrupts?: ReadonlyArray<{ id?: string; value?: unknown }>;
    state?: unknown;
    result?: unknown;
  }>;
}

/** The slice of a compiled LangGraph.js graph the langgraph/* methods read. */
export interface DescribableGraph {
  getGraphAsync(config: RunnableConfig & { xray?: boolean | number }): Promise<{ toJSON(): Record<string, unknown> }>;
  getState(config: RunnableConfig, options?: { subgraphs?: boolean }): Promise<Snapshot>;
  getStateHistory(
    config: RunnableConfig,
    options?: { limit?: number; before?: RunnableConfig; filter?: Record<string, unknown> },
  ): AsyncIterable<Snapshot>;
  updateState(config: RunnableConfig, values: unknown, asNode?: string): Promise<RunnableConfig>;
  streamChannels?: string | string[];
  streamChannelsAsIs?: string | string[];
  inputChannels?: string | string[];
  outputChannels?: string | string[];
}

const isObject = (value: unknown): value is Record<string, unknown> =>
  value !== null && typeof value === "object" && !Array.isArray(value);

interface MessageLike {
  getType(): string;
  toDict(): { type: string; data: Record<string, unknown> };
}

function isMessage(value: unknown): value is MessageLike {
  return (
    isObject(value) &&
    typeof (value as { getType?: unknown }).getType === "function" &&
    typeof (value as { toDict?: unknown }).toDict === "function" &&
    "content" in value
  );
}

/** A value as LangGraph's server writes it: messages as plain objects with their
 * `type` and every field; what JSON cannot say becomes a string. */
export function toApiJson(value: unknown): Json {
  if (value === undefined || value === null) {
    return null;
  }
  if (isMessage(value)) {
    const { data } = value.toDict();
    // As LangGraph.js's server writes a message: the fields it has (no `name` or
    // `id` it was not given), and its type.
    const out = toApiJson(data) as Record<string, unknown>;
    out.type = value.getType();
    return out;
  }
  if (Array.isArray(value)) {
    return value.map(toApiJson);
  }
  if (typeof value === "bigint") {
    return value.toString();
  }
  if (value instanceof Date) {
    return value.toISOString();
  }
  if (value instanceof Error) {
    return `${value.name}: ${value.message}`;
  }
  if (value instanceof Uint8Array) {
    return Buffer.from(value).toString("base64");
  }
  if (value instanceof Set) {
    return [...value].map(toApiJson);
  }
  if (value instanceof Map) {
    return Object.fromEntries([...value].map(([k, v]) => [String(k), toApiJson(v)]));
  }
  if (typeof value === "object") {
    const withJson = value as { toJSON?: () => unknown };
    const proto = Object.getPrototypeOf(value) as unknown;
    const plain = proto === Object.prototype || proto === null;
    if (!plain && typeof withJson.toJSON === "function") {
      return toApiJson(withJson.toJSON());
    }
    const out: Record<string, unknown> = {};
    for (const [key, item] of Object.entries(value)) {
      if (item !== undefined && typeof item !== "function") {
        out[key] = toApiJson(item);
      }
    }
    return out;
  }
  if (typeof value === "function" || typeof value === "symbol") {
    return String(value);
  }
  return value;
}

function checkpointOf(config: RunnableConfig | undefined): Record<string, unknown> | null {
  const configurable = config?.configurable;
  if (!configurable) {
    return null;
  }
  return {
    thread_id: configurable.thread_id ?? null,
    checkpoint_ns: configurable.checkpoint_ns ?? "",
    checkpoint_id: configurable.checkpoint_id ?? null,
    checkpoint_map: configurable.checkpoint_map ?? null,
  };
}

function interruptJson(value: { id?: string; value?: unknown }): Record<string, unknown> {
  return { value: toApiJson(value.value), id: value.id ?? null };
}

function isSnapshot(value: unknown): value is Snapshot {
  return isObject(value) && "values" in value && "next" in value && "tasks" in value;
}

interface ChannelLike {
  fromCheckpoint(checkpoint?: unknown): { get(): unknown };
}

/** The graph's state as its `values` stream shows it: the output channels of a
 * checkpoint's values (a graph with one root channel: that channel's value), with
 * those never written that have a value of their own (a reducer's default). */
export function stateValues(
  graph: { streamChannelsAsIs?: string | string[]; channels?: Record<string, unknown> },
  channelValues: Record<string, unknown>,
): unknown {
  const channels = graph.streamChannelsAsIs;
  if (typeof channels === "string") {
    return toApiJson(channelValues[channels]);
  }
  const values: Record<string, unknown> = {};
  for (const key of channels ?? Object.keys(channelValues)) {
    if (key in channelValues) {
      values[key] = toApiJson(channelValues[key]);
      continue;
    }
    const spec = graph.channels?.[key] as ChannelLike | undefined;
    try {
      const initial = spec?.fromCheckpoint(undefined).get();
      if (initial !== undefined) {
        values[key] = toApiJson(initial);
      }
    } catch {
      // EmptyChannelError: the channel has no value before its first write
    }
  }
  return values;
}

/** A StateSnapshot as LangGraph's API server's ThreadState. */
export function snapshotJson(snapshot: Snapshot): Record<string, unknown> {
  const checkpoint = checkpointOf(snapshot.config);
  const parent = checkpointOf(snapshot.parentConfig);
  const tasks = snapshot.tasks.map((task) => ({
    id: task.id,
    name: task.name,
    path: toApiJson(task.path ?? []),
    error: task.error === undefined || task.error === null ? null : String(toApiJson(task.error)),
    interrupts: (task.interrupts ?? []).map(interruptJson),
    checkpoint:
      isObject(task.state) && isObject(task.state.configurable) ? toApiJson(task.state.configurable) : null,
    state: isSnapshot(task.state) ? snapshotJson(task.state) : null,
    result: toApiJson(task.result),
  }));
  return {
    values: toApiJson(snapshot.values) ?? {},
    next: [...snapshot.next],
    tasks,
    metadata: toApiJson(snapshot.metadata) ?? {},
    created_at: snapshot.createdAt ?? null,
    checkpoint,
    parent_checkpoint: parent,
    checkpoint_id: checkpoint?.checkpoint_id ?? null,
    parent_checkpoint_id: parent?.checkpoint_id ?? null,
    interrupts: snapshot.tasks.flatMap((task) => (task.interrupts ?? []).map(interruptJson)),
  };
}

/** A thread with no checkpoint, as the service and the Python bridge answer it. */
export function emptyThreadState(threadId: string): Record<string, unknown> {
  return {
    values: {},
    next: [],
    tasks: [],
    metadata: {},
    created_at: null,
    checkpoint: { thread_id: threadId, checkpoint_ns: "", checkpoint_id: null, checkpoint_map: null },
    parent_checkpoint: null,
    checkpoint_id: null,
    parent_checkpoint_id: null,
    interrupts: [],
  };
}

function stringParam(params: Record<string, unknown>, name: string, required = false): string | undefined {
  const value = params[name];
  if ((value === undefined || value === null) && !required) {
    return undefined;
  }
  if (typeof value !== "string" || value === "") {
    throw invalidParams(`${name} must be a non-empty string`);
  }
  return value;
}

function channelList(channels: string | string[] | undefined): string[] {
  if (channels === undefined) {
    return [];
  }
  return typeof channels === "string" ? [channels] : [...channels];
}

/** A JSON schema of an object with these keys, each of any type. */
function objectSchema(title: string, keys: string[]): Record<string, unknown> | null {
  if (keys.length === 0) {
    return null;
  }
  return { title, type: "object", properties: Object.fromEntries(keys.map((key) => [key, {}])) };
}

/** The langgraph/* methods of one runner's graph. */
export class GraphApi {
  constructor(
    readonly graph: DescribableGraph,
    readonly agent: string,
  ) {}

  async #drawing(xray: boolean | number = false): Promise<Record<string, unknown>> {
    try {
      const drawn = await this.graph.getGraphAsync({ xray });
      return toApiJson(drawn.toJSON()) as Record<string, unknown>;
    } catch (error) {
      // A graph that cannot be drawn is still served.
      const err = error instanceof Error ? error : new Error(String(error));
      return { nodes: [], edges: [], error: `${err.name}: ${err.message}` };
    }
  }

  /** The graph's schemas: a LangGraph.js graph carries no JSON schema of its state
   * (LangGraph's JS server parses the TypeScript source for one), so these name the
   * graph's channels, each of any type. */
  schemas(): Record<string, unknown> {
    const output = channelList(this.graph.outputChannels ?? this.graph.streamChannelsAsIs).filter(
      (c) => !c.startsWith("__"),
    );
    // A StateGraph reads its input through __start__, into its state's keys.
    const named = channelList(this.graph.inputChannels).filter((c) => !c.startsWith("__"));
    const input = named.length > 0 ? named : output;
    const state = objectSchema(`${this.agent} state`, output);
    return {
      graph_id: this.agent,
      input_schema: objectSchema(`${this.agent} input`, input),
      output_schema: state,
      state_schema: state,
      config_schema: null,
      context_schema: null,
    };
  }

  async description(xray: boolean | number = false): Promise<Record<string, unknown>> {
    return {
      assistant_id: this.agent,
      graph_id: this.agent,
      name: this.agent,
      graph: await this.#drawing(xray),
      schemas: this.schemas(),
    };
  }

  #config(threadId: string, params: Record<string, unknown>): RunnableConfig {
    const configurable: Record<string, unknown> = {
      thread_id: threadId,
      checkpoint_ns: stringParam(params, "checkpoint_ns") ?? "",
    };
    const checkpointId = stringParam(params, "checkpoint_id");
    if (checkpointId !== undefined) {
      configurable.checkpoint_id = checkpointId;
    }
    return { configurable };
  }

  async describe(request: Request): Promise<Reply> {
    const xray = request.params.xray ?? false;
    if (!(typeof xray === "boolean" || (Number.isInteger(xray) && (xray as number) >= 0))) {
      throw invalidParams("xray must be true, false or a whole number of levels");
    }
    const described = await this.description(xray as boolean | number);
    if ("subgraphs" in request.params) {
      // LangGraph.js keeps no schemas of its subgraphs to describe.
      described.subgraphs = {};
    }
    return { result: described };
  }

  async state(request: Request): Promise<Reply> {
    const threadId = stringParam(request.params, "thread_id", true) as string;
    const subgraphs = request.params.subgraphs ?? false;
    if (typeof subgraphs !== "boolean") {
      throw invalidParams("subgraphs must be true or false");
    }
    const snapshot = await this.graph.getState(this.#config(threadId, request.params), { subgraphs });
    if (!snapshot.config?.configurable?.checkpoint_id) {
      return { result: emptyThreadState(threadId) };
    }
    return { result: snapshotJson(snapshot) };
  }

  async history(request: Request): Promise<Reply> {
    const params = request.params;
    const threadId = stringParam(params, "thread_id", true) as string;
    const limit = params.limit ?? 10;
    if (typeof limit !== "number" || !Number.isInteger(limit) || limit < 1 || limit > MAX_HISTORY) {
      throw invalidParams(`limit must be a whole number from 1 to ${MAX_HISTORY}`);
    }
    const metadata = params.metadata ?? undefined;
    if (metadata !== undefined && !isObject(metadata)) {
      throw invalidParams("metadata must be an object");
    }
    const beforeId = stringParam(params, "before");
    const before = beforeId === undefined ? undefined : { configurable: { thread_id: threadId, checkpoint_id: beforeId } };
    const states: Array<Record<string, unknown>> = [];
    for await (const snapshot of this.graph.getStateHistory(this.#config(threadId, params), {
      limit,
      before,
      filter: metadata,
    })) {
      states.push(snapshotJson(snapshot));
    }
    return { result: states };
  }

  async updateState(request: Request): Promise<Reply> {
    const params = request.params;
    const threadId = stringParam(params, "thread_id", true) as string;
    const asNode = stringParam(params, "as_node");
    const config = await this.graph.updateState(this.#config(threadId, params), params.values ?? null, asNode);
    return { result: { checkpoint: checkpointOf(config) } };
  }
}
