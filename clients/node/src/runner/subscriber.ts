// The NATS side: one queue subscription, each request answered on its own.
//
// The handler only starts the work; every request gets an answer (an error one if
// need be), and the answer goes out before any work it triggers starts
// (Reply.after). Ready means the server routes the subject to this subscription:
// after subscribing (and after every reconnect) the subscriber sends
// turnkeeper/ping to the subject until an answer comes back, since the server
// handles one connection's commands in order and so had the SUB before it.

import { randomUUID } from "node:crypto";

import { Match, type Msg, type NatsConnection, type Subscription, connect } from "nats";

import { ConnectError } from "@connectrpc/connect";

import { HEADER as ASSERTION_HEADER } from "../callerAssertion.js";
import type { NatsIdentity } from "../natsIdentity.js";
import type { Announcer } from "./announce.js";
import {
  INTERNAL_ERROR,
  type Reply,
  type Request,
  RpcError,
  errorEnvelope,
  parse,
  requestId,
  resultEnvelope,
} from "./jsonrpc.js";

export const PING = "turnkeeper/ping";
const PROBE_TIMEOUT_MS = 2000;

export type Dispatch = (request: Request) => Promise<Reply>;

export class NatsSubscriber {
  #nc: NatsConnection | undefined;
  #sub: Subscription | undefined;
  #control: Subscription | undefined;
  #version: Subscription | undefined;
  #inflight = new Set<Promise<void>>();
  #stopped = false;
  ready = false;

  constructor(
    readonly url: string,
    readonly subject: string,
    readonly queue: string,
    readonly dispatch: Dispatch,
    readonly name: string,
    readonly log: (line: string) => void,
    /** Heard by every replica (no queue group): notifications such as a cancel,
     * which only the replica running the turn acts on. */
    readonly controlSubject?: string,
    /** The NATS user to connect as (natsIdentity.ts); none: the URL alone. */
    readonly identity?: NatsIdentity,
    /** Hand-offs for this replica's graph version only (docs/versions.md), in a queue
     * group of that version: a turn its agent's version policy keeps for a version
     * goes only to replicas that may take it. */
    readonly versionSubject?: string,
    /** Says, once subscribed, which agent and version this replica serves. */
    readonly announcer?: Announcer,
  ) {}

  /** Connect (retrying until NATS answers), subscribe, and probe. */
  async start(): Promise<void> {
    let delay = 50;
    while (!this.#stopped) {
      try {
        this.#nc = await connect({
          servers: this.url,
          name: this.name,
          maxReconnectAttempts: -1,
          reconnectTimeWait: 500,
          timeout: 2000,
          ...this.identity,
        });
        break;
      } catch (error) {
        this.log(`NATS at ${this.url} not reachable (${(error as Error).message}); retrying`);
        await new Promise((resolve) => setTimeout(resolve, delay));
        delay = Math.min(delay * 2, 2000);
      }
    }
    const nc = this.#nc;
    if (nc === undefined || this.#stopped) {
      await nc?.close();
      return;
    }
    const callback = (_error: unknown, msg: Msg): void => {
      const work = this.#serve(msg);
      this.#inflight.add(work);
      void work.finally(() => this.#inflight.delete(work));
    };
    this.#sub = nc.subscribe(this.subject, { queue: this.queue, callback });
    if (this.controlSubject !== undefined) {
      this.#control = nc.subscribe(this.controlSubject, { callback });
    }
    if (this.versionSubject !== undefined) {
      const version = this.versionSubject.slice(this.versionSubject.lastIndexOf(".") + 1);
      this.#version = nc.subscribe(this.versionSubject, { queue: `${this.queue}.${version}`, callback });
    }
    void this.#watchStatus(nc);
    await this.#probe(nc);
    this.announcer?.start(nc);
    this.log(`serving ${this.subject} (queue group ${this.queue}) on ${this.url}`);
  }

  async #watchStatus(nc: NatsConnection): Promise<void> {
    for await (const status of nc.status()) {
      if (status.type === "disconnect") {
        this.ready = false;
      } else if (status.type === "reconnect") {
        void this.#probe(nc);
      }
    }
  }

  async #probe(nc: NatsConnection): Promise<void> {
    const body = JSON.stringify({ jsonrpc: "2.0", id: `probe-${randomUUID()}`, method: PING });
    let delay = 50;
    while (!this.#stopped && !nc.isClosed()) {
      try {
        await nc.request(this.subject, body, { timeout: PROBE_TIMEOUT_MS });
        this.ready = true;
        return;
      } catch {
        await new Promise((resolve) => setTimeout(resolve, delay));
        delay = Math.min(delay * 2, 1000);
      }
    }
  }

  async #serve(msg: Msg): Promise<void> {
    let request: Request | undefined;
    let reply: Reply | undefined;
    let body: string;
    try {
      request = parse(msg.data);
      // The caller assertion (callers.ts); a bearer token is never taken, only
      // noted, so that the refusal can say it is not to be sent to agents.
      const headers = msg.headers;
      if (headers !== undefined) {
        const assertion = headers.get(ASSERTION_HEADER, Match.IgnoreCase).trim();
        if (assertion) {
          request.assertion = assertion;
        }
        if (headers.has("Authorization", Match.IgnoreCase)) {
          request.bearer = true;
        }
      }
      reply = request.method === PING ? { result: {} } : await this.dispatch(request);
      body = resultEnvelope(request.id, reply.result);
    } catch (error) {
      const id = request ? request.id : requestId(msg.data);
      if (error instanceof RpcError) {
        body = errorEnvelope(id, error);
      } else if (error instanceof ConnectError) {
        body = errorEnvelope(id, RpcError.fromService(error));
      } else {
        const err = error as Error;
        this.log(`handling ${request?.method ?? "a request"} failed: ${err.stack ?? err.message}`);
        body = errorEnvelope(id, new RpcError(INTERNAL_ERROR, `internal error: ${err.name}: ${err.message}`));
      }
    }
    if (msg.reply && (request === undefined || request.wantsReply) && reply?.silent !== true) {
      msg.respond(body);
    }
    if (reply?.after !== undefined) {
      try {
        await reply.after();
      } catch (error) {
        this.log(`the work after ${request?.method ?? "?"} failed: ${(error as Error).message}`);
      }
    }
  }

  /** Stop taking requests, let those in flight answer, close. Safe twice. */
  async stop(): Promise<void> {
    this.#stopped = true;
    this.ready = false;
    this.#sub?.unsubscribe();
    this.#sub = undefined;
    this.#control?.unsubscribe();
    this.#control = undefined;
    this.#version?.unsubscribe();
    this.#version = undefined;
    await this.announcer?.stop(this.#nc);
    await Promise.allSettled([...this.#inflight]);
    const nc = this.#nc;
    this.#nc = undefined;
    if (nc !== undefined && !nc.isClosed()) {
      await nc.close().catch(() => undefined);
    }
  }
}
