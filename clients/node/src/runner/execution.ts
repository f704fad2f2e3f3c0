// One attempt of one turn, executed here.
//
// It owns the attempt while it runs: heartbeats the lease, drives the graph with
// durability "sync" through the BoundarySaver, turns callbacks into events, and
// ends the attempt with exactly one ParkTurn (the graph called interrupt()) or
// FinishTurn (DONE, or FAILED when the graph threw). It starts from the journaled
// input (a new turn, or a re-drive of one that wrote no checkpoint; null continues
// the thread), from the thread's latest checkpoint (a re-drive), or with
// Command({resume}) (a resume of a parked turn).
//
// When a write is refused because the attempt was re-driven away (ABORTED), or the
// turn is no longer RUNNING, the execution stops at once and writes nothing more:
// the service has handed the turn to someone else. When the service cannot be
// reached for longer than the lease it stops too; the turn is re-driven like any
// orphan. Steps are at-least-once: the step running when an execution dies runs
// again in the next attempt (idempotencyKey() gives tools a key per step).

import { createHash } from "node:crypto";

import type { GraphVersion as GraphVersionMessage } from "../gen/turnkeeper/v1/turns_pb.js";
import type { RunnableConfig } from "@langchain/core/runnables";
import { Command, getConfig } from "@langchain/langgraph";

import type { TurnkeeperClient } from "../client.js";
import { codeName, isDeterministic, isFenced, messageOf } from "../errors.js";
import type { Admission } from "./admission.js";
import { type EventInput, Outcome, type Turn, TurnState } from "../gen/turnkeeper/v1/turns_pb.js";
import { durableConfig, durableRunOptions } from "../saver.js";
import { fromValue, toValue } from "../values.js";
import type { BoundarySaver } from "./boundary.js";
import { EventCapture } from "./capture.js";
import { EventLog, register } from "./events.js";
import { toApiJson } from "./graphApi.js";
import { type HistoryGraph, type RunIntent, atCheckpoint, entryCheckpointId, isRegenerate, runIntent } from "./intent.js";

export const DEFAULT_LEASE_MS = 15_000;
export const MAX_ERROR_CHARS = 8000;
const INTERRUPT_KEY = "__interrupt__";

/** The slice of a compiled LangGraph.js graph the runner drives. */
export interface RunnableGraph extends HistoryGraph {
  stream(input: unknown, options: Record<string, unknown>): Promise<AsyncIterable<unknown>>;
  /** LangChain's astream_events (v2), for a LangGraph API run that asks for `events`. */
  streamEvents?(input: unknown, options: Record<string, unknown> & { version: "v2" }): AsyncIterable<unknown>;
  getState(config: RunnableConfig): Promise<{ tasks: ReadonlyArray<{ interrupts?: ReadonlyArray<unknown> }> }>;
}

export interface Identity {
  agent: string;
  replica: string;
  incarnation: string;
}

/** A turn handed to this replica, owned by it, to execute now. */
export interface Assignment {
  turn: Turn;
  /** The checkpoint to continue from; "" to start from the journaled input. */
  checkpointId: string;
  /** "create", "startup redrive", "resume" ... for the logs. */
  reason: string;
}

export interface ExecutionHost {
  graph: RunnableGraph;
  client: TurnkeeperClient;
  saver: BoundarySaver;
  identity: Identity;
  inputMapper: (input: unknown) => unknown;
  log: (line: string) => void;
  /** The graph version this replica serves, as ClaimTurn and StartTurn carry it. */
  graphVersion?: GraphVersionMessage;
  /** Serving the service's LangGraph API: runs carry their own options (intent.ts
   * RunIntent), tokens their message ids, `custom` parts are journaled. */
  langgraphApi?: boolean;
}

/** The config keys a LangGraph API run's own config may set (the rest, callbacks
 * and the like, mean nothing across a process). */
const CONFIG_KEYS = ["tags", "metadata", "recursion_limit", "run_name", "max_concurrency"] as const;
const CONFIG_NAMES: Record<(typeof CONFIG_KEYS)[number], string> = {
  tags: "tags",
  metadata: "metadata",
  recursion_limit: "recursionLimit",
  run_name: "runName",
  max_concurrency: "maxConcurrency",
};

/** The id of the assistant LangGraph's server makes for each graph (uuid5 in the
 * namespace the Python bridge and the service use). */
export function defaultAssistantId(graphId: string): string {
  const namespace = Buffer.from("6ba7b8219dad11d180b400c04fd430c8", "hex");
  const hash = createHash("sha1").update(namespace).update(graphId, "utf8").digest();
  hash[6] = (hash[6] & 0x0f) | 0x50;
  hash[8] = (hash[8] & 0x3f) | 0x80;
  const hex = hash.subarray(0, 16).toString("hex");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** `turn_id:step:attempt` for the step running in `config`, for a tool's idempotency key. */
export function idempotencyKey(config: RunnableConfig): string {
  const turnId = config.configurable?.turn_id as unknown;
  const attempt = config.configurable?.attempt as unknown;
  const step = (config.metadata as Record<string, unknown> | undefined)?.langgraph_step;
  if (turnId === undefined || attempt === undefined || step === undefined) {
    throw new Error("idempotencyKey() works inside a node or tool of a turn run by the TurnRunner");
  }
  return `${String(turnId)}:${String(step)}:${String(attempt)}`;
}

/** A regenerate turn on a thread with no run to go back to: the turn fails. */
export class NothingToRegenerate extends Error {
  override name = "NothingToRegenerate";
}

function leaseMs(turn: Turn): number {
  const expires = turn.owner?.leaseExpiresAt;
  const updated = turn.updatedAt;
  if (expires && updated) {
    // Both times are the service's clock: no skew with ours.
    const ms = Number(expires.seconds - updated.seconds) * 1000 + (expires.nanos - updated.nanos) / 1e6;
    if (ms > 0) {
      return ms;
    }
  }
  return DEFAULT_LEASE_MS;
}

/** Sleep, cut short when `signal` aborts; leaves no listener behind either way. */
function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener("abort", done, { once: true });
  });
}

export class Execution {
  readonly turnId: string;
  readonly attempt: number;
  /** Why the execution stopped early; undefined while it is fine. */
  lost: string | undefined;
  done: Promise<void> = Promise.resolve();
  #host: ExecutionHost;
  #assignment: Assignment;
  #abort = new AbortController();
  #settling = false;
  #events: EventLog | undefined;
  /** The runner's slots (admission.ts); none: no limit. */
  #admission: Admission | undefined;
  /** Whether this execution holds one of them. */
  #slot: boolean;

  /** `slot`: the caller took one of `admission`'s slots for it; otherwise it waits
   * for one (its lease heartbeated meanwhile) before it runs the graph. */
  constructor(host: ExecutionHost, assignment: Assignment, admission?: Admission, slot = false) {
    this.#host = host;
    this.#assignment = assignment;
    this.turnId = assignment.turn.turnId;
    this.attempt = assignment.turn.attempts;
    this.#admission = admission;
    this.#slot = slot;
  }

  #tag(): string {
    return `turn_id=${this.turnId} attempt=${this.attempt}`;
  }

  /** Its ParkTurn or FinishTurn is sent (or committed): it runs no more graph. */
  get settling(): boolean {
    return this.#settling;
  }

  start(): void {
    this.done = this.#run()
      .catch((error: unknown) => {
        this.#host.log(`${this.#tag()}: execution failed: ${messageOf(error)}`);
      })
      .finally(() => {
        if (this.#slot) {
          this.#slot = false;
          this.#admission?.giveBack();
        }
      });
  }

  /** Stop now and write nothing more: the turn is no longer ours. */
  lose(reason: string): void {
    if (this.lost !== undefined || this.#settling) {
      return;
    }
    this.lost = reason;
    this.#host.log(`${this.#tag()}: ${reason}; this execution stops`);
    this.#events?.discard();
    this.#abort.abort(new Error(reason));
  }

  #refused(what: string, error: unknown): void {
    this.lose(`${what} was refused (${messageOf(error)}): the turn was re-driven away or ended`);
  }

  /** Shutdown: stop without writing anything more; the turn is left for a re-drive. */
  abandon(): void {
    this.lose("the runner is shutting down; left for a re-drive");
  }

  async #run(): Promise<void> {
    const host = this.#host;
    const turn = this.#assignment.turn;
    const events = new EventLog(host.client, this.turnId, this.attempt, Number(turn.lastSeq));
    this.#events = events;
    host.saver.attach(events);
    const unregister = register(events);
    host.log(
      `${this.#tag()}: executing (${this.#assignment.reason}, from ${
        this.#assignment.checkpointId ? `checkpoint ${this.#assignment.checkpointId}` : "the journaled input"
      })`,
    );
    const helpers = new AbortController();
    const heartbeat = this.#heartbeat(helpers.signal);
    const flusher = events.run(helpers.signal, (error) => this.#refused("AppendEvents", error));
    try {
      if (await this.#admitted()) {
        await this.#drive(events);
      }
    } finally {
      helpers.abort();
      await Promise.allSettled([heartbeat, flusher]);
      host.saver.detach(events);
      unregister();
    }
  }

  /** Until a slot is free: the turn is ours (its lease heartbeated meanwhile), so it
   * waits here rather than in the journal. False: it stopped first (lost, or the
   * runner shut down) and runs nothing. */
  async #admitted(): Promise<boolean> {
    const admission = this.#admission;
    if (this.#slot || admission === undefined) {
      return true;
    }
    if (!admission.tryTake()) {
      this.#host.log(`${this.#tag()}: waits for a free slot (${admission.inUse} running, --max-turns ${admission.limit})`);
      try {
        await admission.take(this.#abort.signal);
      } catch {
        return false;
      }
    }
    this.#slot = true;
    return this.lost === undefined;
  }

  /** The LangGraph API run this turn is, if it is one. */
  #intent(): RunIntent | undefined {
    return this.#host.langgraphApi ? runIntent(fromValue(this.#assignment.turn.input)) : undefined;
  }

  #config(events: EventLog): RunnableConfig {
    const config = durableConfig(this.#assignment.turn.threadId, this.turnId, this.attempt);
    const api = this.#host.langgraphApi === true;
    const extra: Record<string, unknown> = {};
    let configurable: Record<string, unknown> = {};
    if (api) {
      const agent = this.#host.identity.agent;
      configurable = { run_id: this.turnId, graph_id: agent, assistant_id: defaultAssistantId(agent) };
      // A LangGraph API run's own config (its assistant's merged in), for every
      // execution of the turn: under the turn's own keys.
      const asked = this.#intent()?.config ?? {};
      for (const key of CONFIG_KEYS) {
        if (asked[key] !== undefined) {
          extra[CONFIG_NAMES[key]] = asked[key];
        }
      }
      const own = asked.configurable;
      if (own !== null && typeof own === "object" && !Array.isArray(own)) {
        configurable = { ...configurable, ...(own as Record<string, unknown>) };
      }
    }
    return {
      ...extra,
      ...config,
      configurable: { ...configurable, ...config.configurable },
      callbacks: [new EventCapture(events, api, this.#intent()?.tokens !== false)],
      signal: this.#abort.signal,
    };
  }

  /** A run's own stream options (static interrupts, its context). */
  #runOptions(): Record<string, unknown> {
    const intent = this.#intent();
    const options: Record<string, unknown> = {};
    if (intent?.interrupt_before !== undefined) {
      options.interruptBefore = intent.interrupt_before;
    }
    if (intent?.interrupt_after !== undefined) {
      options.interruptAfter = intent.interrupt_after;
    }
    if (intent?.context !== undefined) {
      options.context = intent.context;
    }
    return options;
  }

  /** The graph's input, and the config to run it with (intent.ts). */
  async #startPoint(config: RunnableConfig): Promise<[unknown, RunnableConfig]> {
    const turn = this.#assignment.turn;
    if (!this.#assignment.checkpointId) {
      const journaled = fromValue(turn.input);
      if (isRegenerate(journaled)) {
        // Looked up again on every start: a re-drive finds the same entry.
        const entry = await entryCheckpointId(this.#host.graph, config);
        if (entry === undefined) {
          throw new NothingToRegenerate(`thread ${turn.threadId} has no run to regenerate`);
        }
        return [null, atCheckpoint(config, entry)];
      }
      const intent = this.#intent();
      if (intent !== undefined) {
        // A LangGraph API run: from its checkpoint (a fork) when it names one, with
        // its Command or its input.
        const at = intent.checkpoint_id ? atCheckpoint(config, intent.checkpoint_id) : config;
        if (intent.command !== undefined) {
          return [new Command(intent.command as ConstructorParameters<typeof Command>[0]), at];
        }
        return [intent.input === null ? null : this.#host.inputMapper(intent.input), at];
      }
      // null continues the thread from its latest checkpoint.
      return [journaled === null ? null : this.#host.inputMapper(journaled), config];
    }
    if (turn.hasResume) {
      const state = await this.#host.graph.getState(config);
      if (state.tasks.some((task) => (task.interrupts?.length ?? 0) > 0)) {
        return [new Command({ resume: fromValue(turn.resume) }), config];
      }
    }
    return [null, config];
  }

  async #drive(events: EventLog): Promise<void> {
    let config = this.#config(events);
    let values: unknown = null;
    const interrupts: Array<{ id?: string; value?: unknown }> = [];
    try {
      let input: unknown;
      [input, config] = await this.#startPoint(config);
      const api = this.#host.langgraphApi === true;
      // A run that goes on from a checkpoint (input null, a Command) writes no
      // checkpoint before its first step, so the saver journals no state: the
      // stream's first `values` (the state it resumes from, which LangGraph.js
      // streams) is journaled instead, on the turn's first execution.
      let startState = api && events.startSeq === 0 && (input === null || input instanceof Command);
      const captures = api ? (this.#intent()?.stream ?? []) : [];
      const stream = chunksOf(
        this.#host.graph,
        input,
        {
          ...(api ? withRunStream(config, events, captures) : config),
          ...this.#runOptions(),
          streamMode: ["values", "updates"],
          ...durableRunOptions(),
        },
        captures.includes("events") ? events : undefined,
      );
      for await (const chunk of stream) {
        const [mode, data] = chunk as [string, unknown];
        if (mode === "values") {
          if (startState && !events.emitted.has("values")) {
            events.emit("values", { values: toApiJson(data) });
          }
          startState = false;
          values = data;
        } else if (mode === "updates" && data !== null && typeof data === "object" && INTERRUPT_KEY in data) {
          interrupts.push(...((data as Record<string, Array<{ id?: string; value?: unknown }>>)[INTERRUPT_KEY] ?? []));
        }
      }
    } catch (error) {
      if (this.lost !== undefined) {
        return; // stopped on purpose: write nothing more
      }
      if (isFenced(error)) {
        this.#refused("a write", error);
        return;
      }
      if (isDeterministic(error)) {
        // A re-drive would hit it again: end the turn instead.
        events.discard();
        await this.#finish(Outcome.FAILED, `the service refused a write: ${messageOf(error)}`, []);
        return;
      }
      if (error instanceof Error && error.name === "ConnectError") {
        this.lose(`a call to the service failed (${messageOf(error)}); leaving the turn for a re-drive`);
        return;
      }
      const err = error instanceof Error ? error : new Error(String(error));
      this.#host.log(`${this.#tag()}: the graph threw: ${err.stack ?? err.message}`);
      const last = await events.close(["error", { type: err.name, message: err.message }]);
      await this.#finish(Outcome.FAILED, `${err.name}: ${err.message}`.slice(0, MAX_ERROR_CHARS), last);
      return;
    }
    if (this.lost !== undefined) {
      return;
    }
    if (interrupts.length > 0) {
      await this.#park(events, interrupts);
    } else {
      const output = this.#host.langgraphApi ? toApiJson(values) : values;
      await this.#finish(Outcome.DONE, "", await events.close(["final", { output }]));
    }
  }

  async #park(events: EventLog, interrupts: Array<{ id?: string; value?: unknown }>): Promise<void> {
    const described = interrupts.map((i) => ({ id: i.id ?? "", value: toApiJson(i.value ?? null) }));
    const value = described.length === 1 ? described[0].value : described;
    this.#settling = true;
    const last = await events.close(...described.map((d): [string, unknown] => ["interrupt", d]));
    const ok = await this.#settle(
      "ParkTurn",
      () =>
        this.#host.client.turns.parkTurn({
          turnId: this.turnId,
          attempt: this.attempt,
          interrupt: toValue(JSON.parse(JSON.stringify(value ?? null))),
          events: last,
        }),
      TurnState.PARKED,
    );
    if (ok) {
      this.#host.log(`${this.#tag()}: parked (waiting for ResumeDetached)`);
    }
  }

  async #finish(outcome: Outcome, error: string, last: EventInput[]): Promise<void> {
    this.#settling = true;
    const target = outcome === Outcome.DONE ? TurnState.DONE : TurnState.FAILED;
    const ok = await this.#settle(
      "FinishTurn",
      () => this.#host.client.turns.finishTurn({ turnId: this.turnId, attempt: this.attempt, outcome, error, events: last }),
      target,
    );
    if (ok) {
      this.#host.log(`${this.#tag()}: ${TurnState[target]}${error ? ` (${error})` : ""}`);
    }
  }

  /**
   * Run a park or finish (a compare-and-set, so never retried blindly): after a
   * transport failure, ask TurnStatus whether it committed before trying again.
   */
  async #settle(rpc: string, call: () => Promise<unknown>, target: TurnState): Promise<boolean> {
    let delay = 200;
    for (let tries = 0; tries < 6; tries += 1) {
      try {
        await call();
        return true;
      } catch (error) {
        if (isFenced(error)) {
          this.#settling = false;
          this.#refused(rpc, error);
          return false;
        }
        this.#host.log(`${this.#tag()}: ${rpc} failed (${codeName((error as { code?: number }).code ?? 2)}); checking the turn`);
      }
      try {
        const status = await this.#host.client.turns.turnStatus({ turnId: this.turnId });
        if (status.attempts === this.attempt && status.state === target) {
          return true;
        }
        if (status.attempts !== this.attempt || status.state !== TurnState.RUNNING) {
          return false;
        }
      } catch {
        // unreachable: try again below
      }
      await sleep(delay);
      delay = Math.min(delay * 2, 2000);
    }
    this.#host.log(`${this.#tag()}: ${rpc} did not get through; the turn will be re-driven`);
    return false;
  }

  async #heartbeat(signal: AbortSignal): Promise<void> {
    const lease = leaseMs(this.#assignment.turn);
    const interval = Math.max(lease / 3, 50);
    let lastOk = Date.now();
    const { replica, incarnation } = this.#host.identity;
    while (!signal.aborted) {
      await sleep(interval, signal);
      if (signal.aborted || this.#settling) {
        return;
      }
      try {
        await this.#host.client.turns.heartbeat(
          { turnId: this.turnId, attempt: this.attempt, replica, incarnation },
          { timeoutMs: Math.max(interval, 1000), signal },
        );
        lastOk = Date.now();
      } catch (error) {
        if (signal.aborted || this.#settling) {
          return;
        }
        if (isFenced(error)) {
          this.#refused("Heartbeat", error);
          return;
        }
        if (Date.now() - lastOk > lease) {
          this.lose(`no heartbeat got through for ${lease} ms, the lease lapsed (${messageOf(error)})`);
          return;
        }
      }
    }
  }
}

/**
 * The graph's stream() chunks ([mode, data]). With `events` (a LangGraph API run
 * that asks for the `events` mode) the run is read through streamEvents (v2), and
 * each event goes to the log as a `stream` part {ns: [], mode: "events"} as
 * LangGraph.js's server sends them: not the hidden ones (`langsmith:hidden`), nor
 * the root graph's own stream chunks, which are the chunks. Read from the stream's
 * output, an event may land after its step's checkpoint: a crash right then loses
 * it, a re-drive never sends it twice.
 */
async function* chunksOf(
  graph: RunnableGraph,
  input: unknown,
  options: Record<string, unknown>,
  events: EventLog | undefined,
): AsyncGenerator<unknown> {
  if (events === undefined || graph.streamEvents === undefined) {
    yield* await graph.stream(input, options);
    return;
  }
  let root: string | undefined;
  for await (const raw of graph.streamEvents(input, { ...options, version: "v2" })) {
    const event = raw as { event?: string; run_id?: string; tags?: string[]; data?: { chunk?: unknown } };
    // The first event is the root graph's start.
    root ??= event.run_id;
    if (event.tags?.includes("langsmith:hidden")) {
      continue;
    }
    if (event.event === "on_chain_stream" && event.run_id === root) {
      yield event.data?.chunk;
      continue;
    }
    const data = toApiJson(event) as { data?: { chunk?: Record<string, unknown> } };
    const chunk = data.data?.chunk;
    if (event.event === "on_chat_model_stream" && chunk !== undefined && chunk.id == null) {
      // The id LangChain.js gives the chunk once the callbacks have seen it (its
      // model run's), which the reference's event, written later, shows.
      chunk.id = `run-${String(event.run_id)}`;
    }
    events.emit("stream", { ns: [], mode: "events", data });
  }
}

/** LangGraph.js's key for a run's stream in a config's configurable: a stream
 * given there gets the parts of the modes it names as the graph writes them. */
const RUN_STREAM_KEY = "__pregel_stream";

/** The modes a run's `stream` option (its captures) asks of the root graph, and
 * those it asks of subgraphs with `subgraphs` (RunIntent.stream; the Python
 * bridge's StreamCapture). */
const ROOT_CAPTURES = ["checkpoints", "tasks", "debug"];
const SUBGRAPH_MODES = ["values", "updates", "custom"];

/**
 * `config` with a writer and a stream LangGraph.js writes the run's parts to as
 * the graph produces them, journaled then: the LangGraph API's `custom` parts
 * (what a node writes with `config.writer`), and what the run's `captures` ask for (the
 * `checkpoints`, `tasks` and `debug` modes; with `subgraphs` the `values`,
 * `updates` and `custom` parts of subgraphs) as `stream` events {ns, mode, data}.
 * A step's parts are so in the log before its `step` event and its checkpoint
 * (the boundary rule), not after, as when read from stream()'s output.
 */
export function withRunStream(config: RunnableConfig, events: EventLog, captures: string[]): RunnableConfig {
  const subgraphs = captures.includes("subgraphs");
  const modes = new Set(ROOT_CAPTURES.filter((m) => captures.includes(m)));
  if (subgraphs) {
    for (const mode of SUBGRAPH_MODES) {
      modes.add(mode);
    }
  }
  const capture = {
    modes,
    push(chunk: [string[], string, unknown]): void {
      const [ns, mode, data] = chunk;
      if (!modes.has(mode) || isCheckpointEnvelope(data)) {
        return; // another stream's mode, or LangGraph.js's own checkpoint marker
      }
      if (ns.length === 0 ? ROOT_CAPTURES.includes(mode) : subgraphs) {
        events.emit("stream", { ns, mode, data: apiPart(mode, data) });
      }
    },
  };
  // A node's `config.writer`: LangGraph.js's own writes to its stream(), read
  // only after the step (so after its `step` event). A subgraph's node writes with
  // it too: under its namespace for a run that streams subgraphs, as LangGraph.js's
  // writer names it (its checkpoint_ns less the node's own part).
  const writer = (data: unknown): void => {
    const at = getConfig()?.configurable?.checkpoint_ns;
    const ns = typeof at === "string" && at ? at.split("|").slice(0, -1) : [];
    if (subgraphs && ns.length > 0) {
      events.emit("stream", { ns, mode: "custom", data: toApiJson(data) });
    } else {
      events.emit("custom", { data: toApiJson(data) });
    }
  };
  return {
    ...config,
    writer,
    configurable: { ...config.configurable, ...(modes.size > 0 ? { [RUN_STREAM_KEY]: capture } : {}) },
  } as RunnableConfig;
}

const isRecord = (value: unknown): value is Record<string, unknown> =>
  value !== null && typeof value === "object" && !Array.isArray(value);

/** LangGraph.js's marker of a checkpoint in a stream (no values, no config). */
function isCheckpointEnvelope(data: unknown): boolean {
  return isRecord(data) && typeof data.id === "string" && ("source" in data || typeof data.step === "number") && !("values" in data) && !("config" in data);
}

/** A config as LangGraph's server shows it: without callbacks and without the
 * run's private configurable keys (`__`-prefixed: LangGraph.js's own, this stream). */
function publicConfig(config: unknown): unknown {
  if (!isRecord(config)) {
    return config;
  }
  const { callbacks: _callbacks, signal: _signal, ...rest } = config;
  const configurable = isRecord(rest.configurable)
    ? Object.fromEntries(Object.entries(rest.configurable).filter(([key]) => !key.startsWith("__")))
    : rest.configurable;
  return { ...rest, configurable };
}

/** A task as LangGraph's server sends it: a subgraph task's config as its `checkpoint`. */
function apiTask(task: unknown): unknown {
  if (!isRecord(task) || !isRecord(task.state) || !isRecord(task.state.configurable)) {
    return task;
  }
  const { state, ...rest } = task;
  return { ...rest, checkpoint: (state as { configurable: unknown }).configurable };
}

/** A captured part as LangGraph's server sends it (JSON, snake_case; the service
 * adds a debug checkpoint's `checkpoint` and `parent_checkpoint`). */
function apiPart(mode: string, data: unknown): unknown {
  if (mode === "checkpoints" && isRecord(data)) {
    return toApiJson({ values: data.values, metadata: data.metadata, next: data.next });
  }
  if (mode === "tasks") {
    return toApiJson(apiTask(data));
  }
  if (mode === "debug" && isRecord(data) && isRecord(data.payload)) {
    if (data.type === "checkpoint") {
      const { parentConfig, config, tasks, ...payload } = data.payload;
      return toApiJson({
        ...data,
        payload: {
          ...payload,
          config: publicConfig(config),
          parent_config: publicConfig(parentConfig),
          tasks: Array.isArray(tasks) ? tasks.map(apiTask) : tasks,
        },
      });
    }
    return toApiJson({ ...data, payload: apiTask(data.payload) });
  }
  return toApiJson(data);
}
