// Who sent a JSON-RPC request on NATS, and whether they may call its method: the
// Python bridge's caller_auth, for the TypeScript runner.
//
// When the service has tokens, every responses/* request carries the caller's
// token in the NATS header `Authorization: Bearer <token>`. The runner asks the
// service who that is (OperationsService/Introspect, with its own agent token) and
// applies the answer: the methods the token's role may call and, for an
// `agent:<name>` token, this agent only. Answers are cached CACHE_MS per token (by
// its hash), so a revoked token is refused at the latest that long after the
// service stopped accepting it. Without tokens on the service, anyone may call.

import { createHash } from "node:crypto";

import type { IntrospectResponse } from "../gen/turnkeeper/v1/operations_pb.js";
import type { TurnkeeperClient } from "../client.js";
import { type Request, RpcError, SERVICE_ERROR } from "./jsonrpc.js";

export const HEADER = "Authorization";
export const CACHE_MS = 2000;
const MAX_CACHED = 1024;

function refusal(code: string, message: string): RpcError {
  return new RpcError(SERVICE_ERROR, message, { code, message });
}

/** The bearer token in an Authorization header value; "" when there is none. */
export function tokenOf(header: string | undefined): string {
  if (header === undefined || header === "") {
    return "";
  }
  const [scheme, ...rest] = header.trim().split(/\s+/);
  const token = rest.join(" ").trim();
  if (scheme?.toLowerCase() !== "bearer" || token === "") {
    throw refusal("UNAUTHENTICATED", `the ${HEADER} header must be 'Bearer <token>'`);
  }
  return token;
}

export class CallerCheck {
  readonly #cache = new Map<string, { expires: number; answer: IntrospectResponse }>();

  constructor(
    readonly client: TurnkeeperClient,
    readonly agent: string,
    readonly ttlMs: number = CACHE_MS,
  ) {}

  async who(token: string): Promise<IntrospectResponse> {
    const key = createHash("sha256").update(token).digest("hex");
    const now = Date.now();
    const cached = this.#cache.get(key);
    if (cached !== undefined && cached.expires > now) {
      return cached.answer;
    }
    const answer = await this.client.operations.introspect({ token });
    if (this.#cache.size >= MAX_CACHED) {
      this.#cache.clear();
    }
    this.#cache.set(key, { expires: now + this.ttlMs, answer });
    return answer;
  }

  /** Throws an RpcError unless the caller may call the method; returns who the
   * caller is ("name (role)"), or null when the service has no tokens. */
  async check(request: Request): Promise<string | null> {
    const token = tokenOf(request.authorization);
    const answer = await this.who(token);
    if (!answer.authentication) {
      return null;
    }
    const method = request.method;
    if (token === "") {
      throw refusal(
        "UNAUTHENTICATED",
        `${method} needs a bearer token: the service has tokens; send the NATS header '${HEADER}: Bearer <token>'`,
      );
    }
    if (!answer.active) {
      throw refusal("UNAUTHENTICATED", "the bearer token is not one the service accepts");
    }
    const role = answer.role === "agent" ? `agent:${answer.agent}` : answer.role;
    const who = `${answer.name} (${role})`;
    if (!answer.methods.includes(method)) {
      const may = answer.methods.length > 0 ? answer.methods.join(", ") : "none of the runner's methods";
      throw refusal("PERMISSION_DENIED", `token ${who} may not call ${method}; it may call ${may}`);
    }
    if (answer.role === "agent" && answer.agent !== this.agent) {
      throw refusal("PERMISSION_DENIED", `token ${who} acts for agent '${answer.agent}', not '${this.agent}'`);
    }
    return who;
  }
}
