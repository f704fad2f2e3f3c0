// GET /healthz on node:http: 200 "ok" when the check passes, 503 with the reason
// otherwise, 404 for any other path. One request per connection, headers capped in
// time, so a stuck client cannot hold the server.

import { type Server, createServer } from "node:http";
import type { AddressInfo } from "node:net";

export type Check = () => Promise<[boolean, string]>;

const HEADERS_TIMEOUT_MS = 5000;

export class HealthServer {
  #server: Server | undefined;

  constructor(
    readonly host: string,
    public port: number,
    readonly check: Check,
  ) {}

  /** Listen; resolves with the bound port (port 0 picks a free one). */
  async start(): Promise<number> {
    const server = createServer((request, response) => {
      response.setHeader("connection", "close");
      response.setHeader("content-type", "text/plain; charset=utf-8");
      if (request.method !== "GET" || request.url !== "/healthz") {
        response.writeHead(404).end("not found\n");
        return;
      }
      // With its length, not chunked: the body reads the same to the simplest probe
      // (and to the Python bridge's own, which the tests share).
      const answer = (status: number, body: string): void => {
        response.setHeader("content-length", Buffer.byteLength(body));
        response.writeHead(status).end(body);
      };
      this.check().then(
        ([healthy, reason]) => answer(healthy ? 200 : 503, `${reason}\n`),
        (error: unknown) => answer(503, `health check failed: ${String(error)}\n`),
      );
    });
    server.headersTimeout = HEADERS_TIMEOUT_MS;
    server.requestTimeout = HEADERS_TIMEOUT_MS;
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(this.port, this.host, () => resolve());
    });
    this.#server = server;
    this.port = (server.address() as AddressInfo).port;
    return this.port;
  }

  get url(): string {
    return `http://${this.host.includes(":") ? `[${this.host}]` : this.host}:${this.port}/healthz`;
  }

  /** Stop listening. Safe twice. */
  async stop(): Promise<void> {
    const server = this.#server;
    this.#server = undefined;
    if (server !== undefined) {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  }
}

/** HOST:PORT (or [v6]:PORT) as [host, port]; a TypeError that says what is wrong. */
export function parseListen(listen: string): [string, number] {
  const match = /^(\[[0-9a-fA-F:]+\]|[^:\s]+):(\d{1,5})$/.exec(listen);
  const port = match ? Number(match[2]) : Number.NaN;
  if (!match || port > 65535) {
    throw new TypeError(`health listen address ${JSON.stringify(listen)} is not HOST:PORT`);
  }
  return [match[1].replace(/^\[|\]$/g, ""), port];
}
