// The graph version this runner serves (docs/versions.md): the shape of the compiled
// LangGraph.js graph, the author's label, their fingerprint, and the stamp each root
// checkpoint records about the code that wrote it. The Python bridge's
// turnkeeper.agent.fingerprint and turnkeeper.graph_versions, in TypeScript.
//
// The shape covers what decides whether a checkpoint can continue on a graph:
// - `nodes`: each node by name, with the channels that trigger it and those it reads;
// - `edges` (`[start, end]`, waiting edges as `[[starts...], end]`) and `branches`
//   (each conditional edge by source and name, with its declared targets, or null);
// - `channels`: every channel with its reducer kind: the channel class, and for a
//   reducer channel the reducer's name and a hash of its source text (a function has
//   no module and qualified name here; its text is what stays the same from one
//   process to the next and changes when the reducer does);
// - `state`: the state's fields (their types are not known at run time: the field's
//   channel class stands in); `input`, `output`; `interrupt_before`/`_after`.
// A thread belongs to one agent, so a TypeScript shape is only ever compared with
// another TypeScript shape; the format is the Python one's, so the service reads it.

import { createHash } from "node:crypto";

import { canonical } from "../canonical.js";

/** The shape format, as the Python bridge's (turnkeeper.graph_versions.SHAPE_FORMAT). */
export const SHAPE_FORMAT = 1;
/** Where a root checkpoint's stamp goes in its `turnkeeper` metadata mark. */
export const STAMP_KEY = "graph";

/** SHA-256 (hex) of the canonical JSON of `{label, shape}`. */
export function fingerprint(shape: unknown, label = ""): string {
  return createHash("sha256").update(canonical({ label, shape }), "ascii").digest("hex");
}

/** A compiled graph's node, as a shape reads it. */
export interface NodeLike {
  triggers?: unknown;
  channels?: unknown;
}

/** A conditional edge's branch, as a shape reads it. */
export interface BranchLike {
  ends?: Record<string, string> | undefined;
}

/** The slice of a compiled LangGraph.js graph a shape is read from. */
export interface Describable {
  nodes: Record<string, NodeLike>;
  channels: Record<string, object>;
  inputChannels?: unknown;
  outputChannels?: unknown;
  interruptBefore?: unknown;
  interruptAfter?: unknown;
  builder?: {
    edges?: Iterable<[string, string]>;
    waitingEdges?: Iterable<[string[], string]>;
    branches?: Record<string, Record<string, BranchLike>>;
    _schemaDefinition?: Record<string, unknown>;
  };
}

function names(value: unknown): string[] | "*" {
  if (value === "*" || (Array.isArray(value) && value.length === 1 && value[0] === "*")) {
    return "*";
  }
  if (typeof value === "string") {
    return [value];
  }
  if (Array.isArray(value)) {
    return value.map(String).sort();
  }
  if (value !== null && typeof value === "object") {
    return Object.values(value as Record<string, unknown>).map(String).sort();
  }
  return [];
}

function sortedKeys<T>(record: Record<string, T>): [string, T][] {
  return Object.entries(record).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
}

/** `LastValue`, `BinaryOperatorAggregate(reducer#1a2b3c4d5e6f)` ... */
export function reducerKind(channel: object): string {
  const kind = channel.constructor.name;
  const operator = (channel as { operator?: unknown }).operator;
  if (typeof operator !== "function") {
    return kind;
  }
  const source = createHash("sha256").update(operator.toString()).digest("hex").slice(0, 12);
  return `${kind}(${operator.name || "anonymous"}#${source})`;
}

/** The JSON shape of a compiled graph (the module's header says what is in it). */
export function graphShape(graph: Describable): Record<string, unknown> {
  const nodes = Object.fromEntries(
    sortedKeys(graph.nodes).map(([name, node]) => [name, { triggers: names(node.triggers), reads: names(node.channels) }]),
  );
  const channels = Object.fromEntries(sortedKeys(graph.channels).map(([name, channel]) => [name, reducerKind(channel)]));
  const builder = graph.builder;
  // Sorted by their JSON text, each edge's computed once.
  const edges = builder
    ? [
        ...[...(builder.edges ?? [])].map(([start, end]) => [start, end] as unknown[]),
        ...[...(builder.waitingEdges ?? [])].map(([starts, end]) => [[...starts].sort(), end] as unknown[]),
      ]
        .map((edge) => [canonical(edge), edge] as const)
        .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
        .map(([, edge]) => edge)
    : [];
  const branches = Object.fromEntries(
    sortedKeys(builder?.branches ?? {}).map(([source, specs]) => [
      source,
      Object.fromEntries(
        sortedKeys(specs).map(([name, spec]) => [name, spec.ends ? [...new Set(Object.values(spec.ends))].sort() : null]),
      ),
    ]),
  );
  const state = Object.fromEntries(
    Object.keys(builder?._schemaDefinition ?? {})
      .sort()
      .map((field) => [field, graph.channels[field]?.constructor.name ?? "unknown"]),
  );
  return {
    format: SHAPE_FORMAT,
    nodes,
    channels,
    input: names(graph.inputChannels),
    output: names(graph.outputChannels),
    interrupt_before: names(graph.interruptBefore),
    interrupt_after: names(graph.interruptAfter),
    edges,
    branches,
    state,
  };
}

/** What a checkpoint records about the code that wrote it (graph_versions.Stamp). */
export interface Stamp {
  fingerprint: string;
  label: string;
  /** Nodes the checkpoint would run next. */
  next: string[];
  /** Channels holding a value -> their reducer kind. */
  channels: Record<string, string>;
}

/** The parts of a LangGraph.js checkpoint a stamp is read from. */
export interface CheckpointLike {
  channel_versions?: Record<string, unknown>;
  versions_seen?: Record<string, Record<string, unknown>>;
  channel_values?: Record<string, unknown>;
}

function newer(version: unknown, seen: unknown): boolean {
  if (seen === undefined || seen === null) {
    return true;
  }
  if (typeof version === "number" && typeof seen === "number") {
    return version > seen;
  }
  return String(version) > String(seen);
}

/** A graph's shape, its author's label, and their fingerprint. */
export class GraphVersion {
  readonly shape: Record<string, unknown>;
  readonly label: string;
  readonly fingerprint: string;

  constructor(graph: Describable, label = "") {
    this.shape = graphShape(graph);
    this.label = label;
    this.fingerprint = fingerprint(this.shape, label);
  }

  /** The stamp of a checkpoint this version writes. A node runs next when a channel
   * that triggers it holds a value written since the node last ran: LangGraph's own
   * rule, read from the checkpoint alone. */
  stamp(checkpoint: CheckpointLike): Stamp {
    const nodes = this.shape.nodes as Record<string, { triggers: string[] | "*" }>;
    const channels = this.shape.channels as Record<string, string>;
    const versions = checkpoint.channel_versions ?? {};
    const seen = checkpoint.versions_seen ?? {};
    const values = checkpoint.channel_values ?? {};
    const next = Object.entries(nodes)
      .filter(([name, node]) =>
        (node.triggers === "*" ? [] : node.triggers).some(
          (channel) => channel in values && channel in versions && newer(versions[channel], seen[name]?.[channel]),
        ),
      )
      .map(([name]) => name)
      .sort();
    const held = Object.fromEntries(
      Object.keys(values)
        .filter((channel) => channel in channels)
        .sort()
        .map((channel) => [channel, channels[channel]]),
    );
    return { fingerprint: this.fingerprint, label: this.label, next, channels: held };
  }
}
