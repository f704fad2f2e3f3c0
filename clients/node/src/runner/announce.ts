// A replica says which agent it serves and the graph version it serves (the Python
// bridge's turnkeeper.agent.bridge.announce): `{agent, replica, incarnation, graph,
// assistant}` on `<prefix>.<ns>.agents.<agent>.announce` once subscribed, again every
// EVERY_MS, whenever the service asks on `<prefix>.<ns>.discover`, and a farewell
// (`leaving: true`) at shutdown. `max_turns` and `full`: its admission limit and
// whether every slot is taken (admission.ts), sent again whenever that changes. The
// service keeps the live replicas of each agent and their versions (`turnkeeper
// agents`), and hands a turn its agent's version policy keeps for a version to a
// replica announcing it (docs/versions.md).
// `assistant`: whether the runner serves the service's LangGraph API (RunnerConfig
// langgraphApi, as turnkeeper-graph runs a langgraph.json's graph); false, the
// service does not list its agent as an assistant.

import type { NatsConnection, Subscription } from "nats";

/** The bridges' announcement period; the service forgets after three silent ones. */
export const EVERY_MS = 30_000;

export class Announcer {
  #fields: Record<string, unknown>;
  #payload: string;
  #farewell: string;
  #timer: NodeJS.Timeout | undefined;
  #sub: Subscription | undefined;
  #nc: NatsConnection | undefined;

  constructor(
    readonly subject: string,
    readonly discoverSubject: string,
    payload: Record<string, unknown>,
    readonly everyMs = EVERY_MS,
  ) {
    this.#fields = { ...payload };
    this.#payload = JSON.stringify(payload);
    this.#farewell = JSON.stringify({ ...payload, leaving: true });
  }

  /** What the announcement says now. */
  get fields(): Readonly<Record<string, unknown>> {
    return this.#fields;
  }

  /** Change what the announcement says (every slot taken, or one free again), and
   * say it now when connected. */
  update(fields: Record<string, unknown>): void {
    this.#fields = { ...this.#fields, ...fields };
    this.#payload = JSON.stringify(this.#fields);
    this.#farewell = JSON.stringify({ ...this.#fields, leaving: true });
    if (this.#nc !== undefined) {
      this.announce(this.#nc);
    }
  }

  /** Announce now and from now on; answer the service's discover. */
  start(nc: NatsConnection): void {
    this.#nc = nc;
    this.#sub ??= nc.subscribe(this.discoverSubject, { callback: () => this.announce(nc) });
    this.announce(nc);
    this.#timer ??= setInterval(() => this.announce(nc), this.everyMs);
    this.#timer.unref();
  }

  announce(nc: NatsConnection): void {
    if (!nc.isClosed()) {
      nc.publish(this.subject, this.#payload); // NATS away: the next period says it again
    }
  }

  /** Stop announcing; say this replica is leaving, so the service drops it at once. */
  async stop(nc: NatsConnection | undefined): Promise<void> {
    clearInterval(this.#timer);
    this.#timer = undefined;
    this.#nc = undefined;
    this.#sub?.unsubscribe();
    this.#sub = undefined;
    if (nc !== undefined && !nc.isClosed()) {
      nc.publish(this.subject, this.#farewell);
      await nc.flush().catch(() => undefined);
    }
  }
}
