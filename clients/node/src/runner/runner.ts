// TurnRunner: hosts a LangGraph.js graph as a turnkeeper agent, with the Python
// bridge's guarantees and its NATS JSON-RPC methods.
//
// Startup: compile the graph with the BoundarySaver, serve /healthz, start
// subscribing on NATS, wait until this runner's own GET /healthz answers 200 (the
// service answers and the NATS subscription is live, however long that takes: no
// timer starts a re-drive while it is 503), then call Redrive with this process's
// new incarnation and run every turn it hands back. The Python bridge's order
// (decisions 38 and 193); /healthz never waits for the re-drive.
// Shutdown (SIGTERM/SIGINT in run()): stop taking requests, let running turns
// finish for shutdownGraceMs and leave the rest to a re-drive, close.

import { create } from "@bufbuild/protobuf";
import { type GraphVersion as GraphVersionMessage, GraphVersionSchema } from "../gen/turnkeeper/v1/turns_pb.js";
import { Announcer } from "./announce.js";
import { DEFAULT_MAX_TURNS, parseMaxTurns } from "./admission.js";
import { canonical } from "../canonical.js";
import { type Describable, GraphVersion } from "./version.js";
import { randomUUID } from "node:crypto";
import { hostname } from "node:os";

import { TurnkeeperClient } from "../client.js";
import { natsIdentityOf } from "../natsIdentity.js";
import { type ConnectionOptions, connectionFromEnv } from "../connection.js";
import { Code, codeOf, messageOf } from "../errors.js";
import { CallerCheck } from "./callers.js";
import { BoundarySaver } from "./boundary.js";
import type { Identity, RunnableGraph } from "./execution.js";
import { HealthServer, parseListen } from "./health.js";
import { type DescribableGraph, GraphApi, stateValues } from "./graphApi.js";
import { Methods } from "./methods.js";
import { TurnRuntime } from "./runtime.js";
import { NatsSubscriber } from "./subscriber.js";

/** GET /healthz's address when TURNKEEPER_HEALTH_LISTEN is not set. */
const DEFAULT_HEALTH_LISTEN = "127.0.0.1:8080";
/** How often startup says, while it waits for /healthz 200, why it is not yet. */
const WAIT_REPORT_MS = 5000;
/** An agent name is a NATS subject token (the service checks the same). */
const AGENT_NAME = /^[A-Za-z0-9_-]{1,64}$/;

export interface RunnerConfig {
  agent: string;
  connection: ConnectionOptions;
  natsUrl: string;
  /** Stable across restarts of the agent (the container's hostname by default). */
  replica: string;
  /** New at every process start. */
  incarnation: string;
  subjectPrefix: string;
  namespace: string;
  shutdownGraceMs: number;
  /** HOST:PORT of GET /healthz (port 0 picks a free one); undefined: none. */
  healthListen?: string;
  /** True when healthListen is the default (no TURNKEEPER_HEALTH_LISTEN): a port
   * another process holds is then replaced by a free one, logged; an address given
   * that is in use ends the start with an error naming the variable. */
  healthListenDefault?: boolean;
  /** The author's name for this version of the graph (docs/versions.md): part of
   * the graph's fingerprint. */
  versionLabel?: string;
  /** Serve the service's LangGraph API (docs/langgraph-api.md): announce the graph
   * as an assistant, and journal the `values` and message parts its runs stream. */
  langgraphApi?: boolean;
  /** Turns this replica executes at once (the Python bridge's `--max-turns`);
   * past it a turn waits, unowned and shown `pending`, until a slot frees. 64
   * unless set; 0: no limit. */
  maxTurns?: number;
}

/**
 * Settings from the environment, the Python bridge's variables: TURNKEEPER_AGENT,
 * TURNKEEPER_NATS_URL (or NATS_URL), TURNKEEPER_REPLICA, TURNKEEPER_SUBJECT_PREFIX,
 * TURNKEEPER_NAMESPACE, TURNKEEPER_SHUTDOWN_GRACE (seconds), TURNKEEPER_HEALTH_LISTEN
 * (/healthz, default 127.0.0.1:8080), TURNKEEPER_VERSION_LABEL (the graph's version
 * label, empty by default), TURNKEEPER_MAX_TURNS (turns run at once, 64 by default,
 * 0: no limit) and the connection's (connectionFromEnv).
 */
export function runnerConfigFromEnv(
  agent?: string,
  env: NodeJS.ProcessEnv = process.env,
  overrides: Partial<RunnerConfig> = {},
): RunnerConfig {
  const name = agent ?? env.TURNKEEPER_AGENT;
  if (!name) {
    throw new TypeError("the agent's name is required (argument or TURNKEEPER_AGENT)");
  }
  const config: RunnerConfig = {
    agent: name,
    connection: connectionFromEnv(env),
    natsUrl: env.TURNKEEPER_NATS_URL || env.NATS_URL || "nats://127.0.0.1:4222",
    replica: env.TURNKEEPER_REPLICA || hostname(),
    incarnation: randomUUID().replaceAll("-", ""),
    subjectPrefix: env.TURNKEEPER_SUBJECT_PREFIX || "vystak",
    namespace: env.TURNKEEPER_NAMESPACE || "default",
    shutdownGraceMs: env.TURNKEEPER_SHUTDOWN_GRACE ? Number(env.TURNKEEPER_SHUTDOWN_GRACE) * 1000 : 10_000,
    healthListen: env.TURNKEEPER_HEALTH_LISTEN || DEFAULT_HEALTH_LISTEN,
    healthListenDefault: !env.TURNKEEPER_HEALTH_LISTEN,
    versionLabel: env.TURNKEEPER_VERSION_LABEL || "",
    langgraphApi: ["1", "true", "yes"].includes((env.TURNKEEPER_LANGGRAPH_API ?? "").toLowerCase()),
    // An override (turnkeeper-graph --max-turns) wins over the variable, read or not.
    maxTurns:
      overrides.maxTurns ??
      (env.TURNKEEPER_MAX_TURNS?.trim() ? parseMaxTurns(env.TURNKEEPER_MAX_TURNS) : DEFAULT_MAX_TURNS),
  };
  if (overrides.healthListen !== undefined && overrides.healthListenDefault === undefined) {
    config.healthListenDefault = false;
  }
  return { ...config, ...overrides };
}

/** `<prefix>.<ns>.agents.<agent>.tasks`: where requests for the agent go. */
export function agentSubject(config: RunnerConfig): string {
  return `${config.subjectPrefix}.${config.namespace}.agents.${config.agent}.tasks`;
}

/** `<prefix>.<ns>.agents.<agent>.versions.<fingerprint>`: hand-offs of turns the
 * agent's version policy keeps for that graph version (docs/versions.md). */
export function versionSubject(config: RunnerConfig, fingerprint: string): string {
  return `${config.subjectPrefix}.${config.namespace}.agents.${config.agent}.versions.${fingerprint}`;
}

/** `<prefix>.<ns>.agents.<agent>.announce`: where a replica says what it serves. */
export function announceSubject(config: RunnerConfig): string {
  return `${config.subjectPrefix}.${config.namespace}.agents.${config.agent}.announce`;
}

/** `<prefix>.<ns>.discover`: where the service asks every replica to announce. */
export function discoverSubject(config: RunnerConfig): string {
  return `${config.subjectPrefix}.${config.namespace}.discover`;
}

/** `<prefix>.<ns>.agents.<agent>.control`: what the service tells every replica. */
export function controlSubject(config: RunnerConfig): string {
  return `${config.subjectPrefix}.${config.namespace}.agents.${config.agent}.control`;
}

/** A StateGraph: anything the runner can compile with its checkpointer. */
export interface Compilable {
  compile(options: { checkpointer: BoundarySaver }): unknown;
}

export interface TurnRunnerOptions {
  /** Turns the JSON input of responses/create into the graph's input (identity by default). */
  inputMapper?: (input: unknown) => unknown;
  /** Where log lines go (stderr by default). */
  log?: (line: string) => void;
}

export class TurnRunner {
  readonly config: RunnerConfig;
  readonly identity: Identity;
  readonly client: TurnkeeperClient;
  readonly saver: BoundarySaver;
  readonly graph: RunnableGraph;
  /** @internal The runner's parts, reachable for tests; not an API. */
  readonly runtime: TurnRuntime;
  /** @internal */
  readonly methods: Methods;
  /** @internal */
  readonly subscriber: NatsSubscriber;
  readonly log: (line: string) => void;
  /** @internal */
  readonly health: HealthServer | undefined;
  /** What this replica serves (docs/versions.md): announced, sent with Redrive,
   * ClaimTurn and StartTurn, and stamped on every root checkpoint. */
  readonly version: GraphVersion;
  #started = false;
  #stopping: Promise<void> | undefined;

  /**
   * @param graph a StateGraph (compiled here with the runner's checkpointer) or a
   *   compiled graph (its checkpointer replaced by the runner's)
   */
  constructor(graph: Compilable | { checkpointer?: unknown }, config: RunnerConfig, options: TurnRunnerOptions = {}) {
    if (!AGENT_NAME.test(config.agent)) {
      throw new TypeError(`agent must be 1-64 of A-Z a-z 0-9 _ - (a NATS subject token), got ${JSON.stringify(config.agent)}`);
    }
    this.config = config;
    this.identity = { agent: config.agent, replica: config.replica, incarnation: config.incarnation };
    this.log = options.log ?? ((line) => process.stderr.write(`[turnkeeper ${config.agent}] ${line}\n`));
    this.client = new TurnkeeperClient(config.connection);
    this.saver = new BoundarySaver({ client: this.client });
    if ("compile" in graph && typeof graph.compile === "function") {
      this.graph = graph.compile({ checkpointer: this.saver }) as RunnableGraph;
    } else {
      (graph as { checkpointer?: unknown }).checkpointer = this.saver;
      this.graph = graph as unknown as RunnableGraph;
    }
    if ((config.versionLabel ?? "").length > 128) {
      throw new TypeError("versionLabel: at most 128 characters");
    }
    this.version = new GraphVersion(this.graph as unknown as Describable, config.versionLabel ?? "");
    this.saver.stampOf = (checkpoint) => this.version.stamp(checkpoint);
    if (config.langgraphApi === true) {
      const drawn = this.graph as unknown as Parameters<typeof stateValues>[0];
      this.saver.valuesOf = (channelValues) => stateValues(drawn, channelValues);
      const outputs = (this.graph as unknown as { outputChannels?: string | string[] }).outputChannels;
      if (outputs !== undefined) {
        const written = typeof outputs === "string" ? [outputs] : outputs;
        this.saver.writesValues = (newVersions) => written.some((channel) => channel in newVersions);
      }
    }
    const maxTurns = config.maxTurns ?? DEFAULT_MAX_TURNS;
    this.runtime = new TurnRuntime(
      {
        graph: this.graph,
        client: this.client,
        saver: this.saver,
        identity: this.identity,
        inputMapper: options.inputMapper ?? ((input) => input),
        log: this.log,
        graphVersion: this.versionMessage,
        langgraphApi: config.langgraphApi === true,
      },
      maxTurns,
    );
    // With a token, the service has tokens: callers prove who they are with a caller
    // assertion the service signed, which this runner verifies with its token.
    // Without one, the service has none either, and every caller is taken.
    const token = config.connection.bearerToken;
    this.methods = new Methods(
      this.client,
      this.runtime,
      this.identity,
      token ? new CallerCheck(token, config.agent) : undefined,
      this.log,
      new GraphApi(this.graph as unknown as DescribableGraph, config.agent),
    );
    if (config.healthListen !== undefined) {
      const [host, port] = parseListen(config.healthListen);
      this.health = new HealthServer(host, port, () => this.#check());
    }
    this.subscriber = new NatsSubscriber(
      config.natsUrl,
      agentSubject(config),
      `agents.${config.agent}`,
      (request) => this.methods.dispatch(request),
      `turnkeeper-runner/${config.agent}/${config.replica}`,
      this.log,
      controlSubject(config),
      // With a token: connect as its own NATS user (the bundled server's, or the
      // same users on yours); a server without users takes it too.
      token ? natsIdentityOf(token) : undefined,
      versionSubject(config, this.version.fingerprint),
      new Announcer(announceSubject(config), discoverSubject(config), {
        agent: config.agent,
        replica: config.replica,
        incarnation: config.incarnation,
        graph: { fingerprint: this.version.fingerprint, label: this.version.label, shape: this.version.shape },
        assistant: config.langgraphApi === true,
        // Its admission limit, and whether every slot is taken (turns wait): the
        // service says so of a turn nobody runs yet.
        max_turns: maxTurns,
        full: false,
      }),
    );
    // Every slot taken, or one free again: said to the service at once.
    this.runtime.admission.onFull = (full) => this.subscriber.announcer?.update({ full });
  }

  /** This replica's graph version as Redrive, ClaimTurn and StartTurn carry it. */
  get versionMessage(): GraphVersionMessage {
    return create(GraphVersionSchema, {
      fingerprint: this.version.fingerprint,
      label: this.version.label,
      shapeJson: canonical(this.version.shape),
    });
  }

  /** Wait for the service, subscribe, re-drive this replica's orphans. */
  async start(): Promise<void> {
    if (this.#started) {
      return;
    }
    this.#started = true;
    this.log(`agent ${this.identity.agent} replica ${this.identity.replica} incarnation ${this.identity.incarnation}`);
    if (this.health !== undefined) {
      await this.#listenHealth(this.health);
      this.log(`/healthz on ${this.health.url}`);
    }
    await this.#waitForService();
    if (this.#stopping !== undefined) {
      return;
    }
    // The subscription is made in the background (it retries until NATS answers);
    // the re-drive waits for it through /healthz, as an orchestrator would.
    this.subscriber.start().catch((error: unknown) => {
      this.log(`NATS subscription failed: ${messageOf(error)}`);
    });
    if (!(await this.#waitUntilHealthy())) {
      return;
    }
    await this.#redrive();
  }

  /** Listen for /healthz; the default port, when another process holds it, gives way
   * to a free one (two agents on one machine both come up). */
  async #listenHealth(health: HealthServer): Promise<void> {
    try {
      await health.start();
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EADDRINUSE") {
        throw error;
      }
      const wanted = `${health.host}:${health.port}`;
      if (!this.config.healthListenDefault) {
        throw new Error(
          `/healthz cannot listen on ${wanted}: the port is in use; ` +
            "set TURNKEEPER_HEALTH_LISTEN to a free HOST:PORT (port 0 picks one)",
        );
      }
      health.port = 0;
      await health.start();
      this.log(
        `/healthz: ${wanted} is in use (another agent?); listening on a free port instead ` +
          "(set TURNKEEPER_HEALTH_LISTEN to choose)",
      );
    }
  }

  /**
   * Until this runner's own GET /healthz answers 200 (the check itself when it
   * serves none); false when it is shut down first. Asked over HTTP: 200 proves the
   * listener too. With NATS down the orphans stay RUNNING in the journal and no
   * re-drive attempt is spent by a replica that is not ready.
   */
  async #waitUntilHealthy(): Promise<boolean> {
    let delay = 50;
    let reported = -Infinity;
    while (this.#stopping === undefined) {
      const [healthy, reason] = await this.#askHealth();
      if (healthy) {
        return true;
      }
      if (Date.now() - reported >= WAIT_REPORT_MS) {
        this.log(`startup Redrive waits for /healthz 200: ${reason.trim()}`);
        reported = Date.now();
      }
      await new Promise((resolve) => setTimeout(resolve, delay));
      delay = Math.min(delay * 2, 1000);
    }
    return false;
  }

  async #askHealth(): Promise<[boolean, string]> {
    if (this.health === undefined) {
      return this.#check();
    }
    try {
      const response = await fetch(this.health.url, { signal: AbortSignal.timeout(5000) });
      return [response.status === 200, await response.text()];
    } catch (error) {
      return [false, `GET ${this.health.url} failed: ${messageOf(error)}`];
    }
  }

  /** What GET /healthz answers: the service takes our calls and NATS routes to us. */
  async #check(): Promise<[boolean, string]> {
    if (this.#stopping !== undefined) {
      return [false, "shutting down"];
    }
    try {
      await this.client.turns.turnStatus({ turnId: "turnkeeper-runner-probe" }, { timeoutMs: 2000 });
    } catch (error) {
      return [false, `turnkeeper service at ${this.config.connection.address}: ${messageOf(error)}`];
    }
    if (!this.subscriber.ready) {
      return [false, `NATS: the subscription to ${this.subscriber.subject} on ${this.config.natsUrl} is not live`];
    }
    return [true, "ok"];
  }

  async #waitForService(): Promise<void> {
    let delay = 50;
    while (this.#stopping === undefined) {
      try {
        await this.client.turns.turnStatus({ turnId: "turnkeeper-runner-probe" }, { timeoutMs: 2000 });
        return;
      } catch (error) {
        const code = codeOf(error);
        if (code === Code.Unauthenticated || code === Code.PermissionDenied) {
          throw new Error(
            `the turnkeeper service at ${this.config.connection.address} refused this agent's credentials ` +
              `(${messageOf(error)}); check TURNKEEPER_TOKEN (an agent:${this.identity.agent} token) and the TLS settings`,
          );
        }
        await new Promise((resolve) => setTimeout(resolve, delay));
        delay = Math.min(delay * 2, 1000);
      }
    }
  }

  async #redrive(): Promise<void> {
    let delay = 200;
    let response;
    for (;;) {
      try {
        response = await this.client.turns.redrive({
          agent: this.identity.agent,
          replica: this.identity.replica,
          incarnation: this.identity.incarnation,
          graph: this.versionMessage,
        });
        break;
      } catch (error) {
        if (codeOf(error) !== Code.Unavailable) {
          throw error;
        }
        // Safe to repeat: turns already moved to this incarnation are not moved again.
        this.log(`Redrive failed (${messageOf(error)}); retrying`);
        await new Promise((resolve) => setTimeout(resolve, delay));
        delay = Math.min(delay * 2, 2000);
      }
    }
    for (const redriven of response.turns) {
      const turn = redriven.turn;
      if (turn === undefined) {
        continue;
      }
      if (redriven.failedAtCap) {
        this.log(`turn_id=${turn.turnId}: FAILED at the re-drive cap after ${turn.crashesCharged} re-drives; not run again`);
        continue;
      }
      this.runtime.start({ turn, checkpointId: redriven.checkpointId, reason: "startup redrive" });
    }
    this.log(`startup Redrive: ${response.turns.length} turn(s) taken over`);
  }

  /** Start, then serve until SIGTERM or SIGINT (or shutdown()). */
  async run(): Promise<void> {
    let stopped!: () => void;
    const done = new Promise<void>((resolve) => {
      stopped = resolve;
    });
    const onSignal = (): void => {
      void this.shutdown().then(stopped);
    };
    process.once("SIGTERM", onSignal);
    process.once("SIGINT", onSignal);
    try {
      // A signal during start (the service or NATS unreachable) ends the wait too.
      await Promise.race([this.start(), done]);
      await done;
    } finally {
      process.off("SIGTERM", onSignal);
      process.off("SIGINT", onSignal);
    }
  }

  /** Stop taking requests, let turns finish for the grace, close. Safe twice. */
  shutdown(graceMs = this.config.shutdownGraceMs): Promise<void> {
    this.#stopping ??= (async () => {
      this.methods.accepting = false;
      await this.subscriber.stop();
      await this.runtime.stop(graceMs);
      await this.health?.stop();
      this.client.close();
    })();
    return this.#stopping;
  }
}
