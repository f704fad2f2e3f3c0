// Who sent a JSON-RPC request on NATS, and whether they may call its method: the
// Python bridge's caller_auth, for the TypeScript runner.
//
// When the service has tokens, a caller's bearer token never reaches an agent: every
// responses/* request carries instead, in the NATS header Turnkeeper-Assertion, a
// caller assertion the service signed for this agent, this method and this request
// id (../callerAssertion.ts). The runner verifies it with its own token (no call to
// the service), takes each request id once, and applies what it says: the methods
// the caller's role may call. The runner passes the assertion on with the calls it
// makes for the caller (StartTurn, ResumeDetached, CancelTurn), so the service
// applies the caller's rights as well as the agent's and names the caller in its
// audit log.
//
// A runner without a token talks to a service without tokens: it has no CallerCheck
// and every caller may call everything, as on gRPC.
//
// Refusals are -32000 errors whose data.code is UNAUTHENTICATED (no assertion, or
// one that is not valid here) or PERMISSION_DENIED (a role without the method), with
// a message that says which.

import {
  AssertionRefused,
  type CallerAssertion,
  HEADER,
  ReplayGuard,
  keyOfToken,
  requestIdText,
  verify,
  who,
} from "../callerAssertion.js";
import { type Request, RpcError, SERVICE_ERROR } from "./jsonrpc.js";

export { HEADER };

function refusal(code: string, message: string): RpcError {
  return new RpcError(SERVICE_ERROR, message, { code, message });
}

/** Verifies each request's caller assertion with this agent's own token. */
export class CallerCheck {
  readonly #keys: Buffer[];
  readonly #replays = new ReplayGuard();

  /**
   * @param token this agent's token (an `agent:<agent>` token of the service)
   * @param clock seconds since the epoch
   */
  constructor(
    token: string,
    readonly agent: string,
    readonly clock: () => number = () => Date.now() / 1000,
  ) {
    if (!token) {
      throw new TypeError("a CallerCheck needs the agent's token (without one, every caller is taken)");
    }
    this.#keys = [keyOfToken(token)];
  }

  /** Throws an RpcError unless the request carries a valid assertion whose caller
   * may call the method; returns the assertion. */
  check(request: Request): CallerAssertion {
    const value = request.assertion?.trim() ?? "";
    if (!value) {
      throw refusal(
        "UNAUTHENTICATED",
        `${request.method} needs a caller assertion in the NATS header ${HEADER}: ` +
          "the service issues one per request (POST /v1/agents/<agent>/rpc relays " +
          "with one; OperationsService/IssueAssertion gives one)" +
          (request.bearer ? "; a bearer token is never sent to an agent" : ""),
      );
    }
    const now = this.clock();
    let assertion: CallerAssertion;
    try {
      assertion = verify(value, this.#keys, {
        agent: this.agent,
        method: request.method,
        requestId: requestIdText(request.id),
        now,
      });
      this.#replays.take(assertion, now);
    } catch (error) {
      if (error instanceof AssertionRefused) {
        throw refusal("UNAUTHENTICATED", error.message);
      }
      throw error;
    }
    if (!assertion.methods.includes(request.method)) {
      const may = assertion.methods.length > 0 ? assertion.methods.join(", ") : "none of the runner's methods";
      throw refusal("PERMISSION_DENIED", `${who(assertion)} may not call ${request.method}; it may call ${may}`);
    }
    return assertion;
  }
}
